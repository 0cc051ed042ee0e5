//! The PKCS#7 SignedData of a module's appended signature, read as far as its signers: a
//! minimal DER reader and the kernel's shortened certificate names (nothing is verified here).

use super::SignerId;

pub(super) const TAG_INTEGER: u8 = 0x02;
pub(super) const TAG_OID: u8 = 0x06;
pub(super) const TAG_SEQUENCE: u8 = 0x30;
pub(super) const TAG_SET: u8 = 0x31;
pub(super) const TAG_CONTEXT_0: u8 = 0xa0;
pub(super) const TAG_CONTEXT_1: u8 = 0xa1;
/// `[0] IMPLICIT SubjectKeyIdentifier`, a primitive OCTET STRING.
pub(super) const TAG_SUBJECT_KEY_ID: u8 = 0x80;

/// pkcs7-signedData, 1.2.840.113549.1.7.2.
pub(super) const OID_SIGNED_DATA: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x07, 0x02];
pub(super) const OID_COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
pub(super) const OID_ORGANIZATION: &[u8] = &[0x55, 0x04, 0x0a];
pub(super) const OID_EMAIL: &[u8] = &[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x09, 0x01];

/// The signers of a DER PKCS#7 ContentInfo holding SignedData.
pub(super) fn pkcs7_signers(blob: &[u8]) -> Result<Vec<SignerId>, &'static str> {
    let mut outer = Der(blob);
    let mut content_info = Der(outer.expect(TAG_SEQUENCE)?);
    if content_info.expect(TAG_OID)? != OID_SIGNED_DATA {
        return Err("PKCS#7 content is not signedData");
    }
    let mut signed_data = Der(Der(content_info.expect(TAG_CONTEXT_0)?).expect(TAG_SEQUENCE)?);
    signed_data.expect(TAG_INTEGER)?; // version
    signed_data.expect(TAG_SET)?; // digestAlgorithms
    signed_data.expect(TAG_SEQUENCE)?; // contentInfo
    let mut signer_infos = loop {
        match signed_data.next()? {
            Some((TAG_CONTEXT_0 | TAG_CONTEXT_1, _)) => continue, // certificates, crls
            Some((TAG_SET, infos)) => break Der(infos),
            _ => return Err("PKCS#7 SignedData without signerInfos"),
        }
    };
    let mut signers = Vec::new();
    while let Some((tag, info)) = signer_infos.next()? {
        if tag != TAG_SEQUENCE {
            return Err("PKCS#7 SignerInfo is not a SEQUENCE");
        }
        let mut info = Der(info);
        info.expect(TAG_INTEGER)?; // version
        let signer = match info.next()? {
            Some((TAG_SEQUENCE, issuer_and_serial)) => {
                let mut fields = Der(issuer_and_serial);
                let issuer = fabricated_name(fields.expect(TAG_SEQUENCE)?)?;
                let serial = fields.expect(TAG_INTEGER)?.to_vec();
                SignerId::IssuerSerial { issuer, serial }
            }
            Some((TAG_SUBJECT_KEY_ID, id)) => SignerId::SubjectKeyId(id.to_vec()),
            _ => return Err("PKCS#7 SignerInfo without a signer identifier"),
        };
        signers.push(signer);
    }
    Ok(signers)
}

/// An X.501 Name shortened as the kernel names a certificate's subject in a key's description
/// (crypto/asymmetric_keys/x509_cert_parser.c, `x509_fabricate_name`): the last CN, O and
/// e-mail address; CN alone when O is its prefix (or both share their first 7 bytes), else
/// `O: CN`; then CN, O or the e-mail address alone.
fn fabricated_name(name: &[u8]) -> Result<String, &'static str> {
    let (mut cn, mut o, mut email): (&[u8], &[u8], &[u8]) = (&[], &[], &[]);
    let mut rdns = Der(name);
    while let Some((tag, rdn)) = rdns.next()? {
        if tag != TAG_SET {
            return Err("certificate name part is not a SET");
        }
        let mut attributes = Der(rdn);
        while let Some((tag, attribute)) = attributes.next()? {
            if tag != TAG_SEQUENCE {
                return Err("certificate name attribute is not a SEQUENCE");
            }
            let mut attribute = Der(attribute);
            let oid = attribute.expect(TAG_OID)?;
            let Some((_, value)) = attribute.next()? else {
                return Err("certificate name attribute without a value");
            };
            match oid {
                OID_COMMON_NAME => cn = value,
                OID_ORGANIZATION => o = value,
                OID_EMAIL => email = value,
                _ => {}
            }
        }
    }
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    Ok(match (cn.is_empty(), o.is_empty()) {
        (false, false) if cn.starts_with(o) => text(cn),
        (false, false) if cn.len() >= 7 && o.len() >= 7 && cn[..7] == o[..7] => text(cn),
        (false, false) => format!("{}: {}", text(o), text(cn)),
        (false, true) => text(cn),
        (true, false) => text(o),
        (true, true) => text(email),
    })
}

/// A DER reader over the elements of one constructed value.
struct Der<'a>(&'a [u8]);

impl<'a> Der<'a> {
    /// The next element's tag and content; `None` at the end.
    fn next(&mut self) -> Result<Option<(u8, &'a [u8])>, &'static str> {
        let Some((&tag, rest)) = self.0.split_first() else {
            return Ok(None);
        };
        if tag & 0x1f == 0x1f {
            return Err("DER tag in the long form");
        }
        let (&first, rest) = rest.split_first().ok_or("DER element without a length")?;
        let (len, rest) = match first {
            0..=0x7f => (usize::from(first), rest),
            0x81..=0x84 => {
                let count = usize::from(first & 0x7f);
                if rest.len() < count {
                    return Err("DER length cut short");
                }
                let (bytes, rest) = rest.split_at(count);
                let len = bytes
                    .iter()
                    .fold(0usize, |len, &b| len << 8 | usize::from(b));
                (len, rest)
            }
            _ => return Err("DER length indefinite or too large"),
        };
        if rest.len() < len {
            return Err("DER element longer than its container");
        }
        let (content, rest) = rest.split_at(len);
        self.0 = rest;
        Ok(Some((tag, content)))
    }

    /// The next element's content, which must have tag `tag`.
    fn expect(&mut self, tag: u8) -> Result<&'a [u8], &'static str> {
        match self.next()? {
            Some((found, content)) if found == tag => Ok(content),
            _ => Err("PKCS#7 element missing or of an unexpected type"),
        }
    }
}
