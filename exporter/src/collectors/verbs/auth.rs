//! Proof of the shared token without sending it: HMAC-SHA256, keyed with the token, over the
//! handshake's transcript (the protocol version, both sides' fresh nonces, the client's
//! endpoint and ping-pong count, and for the responder's proof its endpoint too), with a label
//! per direction so that one side's proof is never the other's. A recorded session replayed
//! to a responder fails: the responder's nonce is new, so the recorded proof covers another
//! transcript. Without a token both sides key with the empty token: a token on one side only
//! is a mismatch.

use ring::hmac;
use ring::rand::{SecureRandom, SystemRandom};

use super::engine::Endpoint;
use super::oob::{put_endpoint, NONCE_LEN, PROOF_LEN, VERSION};

const CLIENT_LABEL: &[u8] = b"hpcnode verbs probe client proof";
const RESPONDER_LABEL: &[u8] = b"hpcnode verbs probe responder proof";

#[derive(Debug, thiserror::Error)]
#[error("the system's random number generator failed")]
pub struct RandomError;

/// A nonce from the operating system's random number generator.
pub fn nonce() -> Result<[u8; NONCE_LEN], RandomError> {
    let mut nonce = [0; NONCE_LEN];
    SystemRandom::new()
        .fill(&mut nonce)
        .map_err(|_| RandomError)?;
    Ok(nonce)
}

/// What both sides agreed on before the proofs.
pub struct Transcript {
    bytes: Vec<u8>,
}

impl Transcript {
    pub fn new(
        client_nonce: &[u8; NONCE_LEN],
        responder_nonce: &[u8; NONCE_LEN],
        client: &Endpoint,
        latency_iterations: u32,
    ) -> Transcript {
        let mut bytes = vec![VERSION];
        bytes.extend_from_slice(client_nonce);
        bytes.extend_from_slice(responder_nonce);
        put_endpoint(&mut bytes, client);
        bytes.extend_from_slice(&latency_iterations.to_be_bytes());
        Transcript { bytes }
    }

    fn signed(&self, label: &[u8], responder: Option<&Endpoint>) -> Vec<u8> {
        let mut message = label.to_vec();
        message.extend_from_slice(&self.bytes);
        if let Some(responder) = responder {
            put_endpoint(&mut message, responder);
        }
        message
    }

    pub fn client_proof(&self, token: &[u8]) -> [u8; PROOF_LEN] {
        tag(token, &self.signed(CLIENT_LABEL, None))
    }

    /// The responder's proof also covers the endpoint it announces with it.
    pub fn responder_proof(&self, token: &[u8], responder: &Endpoint) -> [u8; PROOF_LEN] {
        tag(token, &self.signed(RESPONDER_LABEL, Some(responder)))
    }

    /// Compared in constant time.
    pub fn client_proved(&self, token: &[u8], proof: &[u8; PROOF_LEN]) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, token);
        hmac::verify(&key, &self.signed(CLIENT_LABEL, None), proof).is_ok()
    }

    pub fn responder_proved(
        &self,
        token: &[u8],
        responder: &Endpoint,
        proof: &[u8; PROOF_LEN],
    ) -> bool {
        let key = hmac::Key::new(hmac::HMAC_SHA256, token);
        hmac::verify(&key, &self.signed(RESPONDER_LABEL, Some(responder)), proof).is_ok()
    }
}

fn tag(token: &[u8], message: &[u8]) -> [u8; PROOF_LEN] {
    let key = hmac::Key::new(hmac::HMAC_SHA256, token);
    let mut proof = [0; PROOF_LEN];
    proof.copy_from_slice(hmac::sign(&key, message).as_ref());
    proof
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collectors::verbs::engine::test_endpoint as endpoint;

    #[test]
    fn proofs_verify_with_the_token_only() {
        let transcript = Transcript::new(&[1; NONCE_LEN], &[2; NONCE_LEN], &endpoint(1), 10);
        let proof = transcript.client_proof(b"s3cret");
        assert!(transcript.client_proved(b"s3cret", &proof));
        assert!(!transcript.client_proved(b"s3cret!", &proof));
        assert!(!transcript.client_proved(b"", &proof));
        let responder = transcript.responder_proof(b"s3cret", &endpoint(2));
        assert!(transcript.responder_proved(b"s3cret", &endpoint(2), &responder));
        assert!(!transcript.responder_proved(b"guess", &endpoint(2), &responder));
    }

    /// Each nonce, each endpoint field and the direction change the proof: a recorded proof
    /// fits no other session, and a client's proof is no responder's.
    #[test]
    fn a_proof_is_bound_to_its_transcript_and_direction() {
        let token = b"s3cret";
        let base = Transcript::new(&[1; NONCE_LEN], &[2; NONCE_LEN], &endpoint(1), 10);
        let proof = base.client_proof(token);
        for other in [
            Transcript::new(&[1; NONCE_LEN], &[3; NONCE_LEN], &endpoint(1), 10),
            Transcript::new(&[0; NONCE_LEN], &[2; NONCE_LEN], &endpoint(1), 10),
            Transcript::new(&[1; NONCE_LEN], &[2; NONCE_LEN], &endpoint(7), 10),
            Transcript::new(&[1; NONCE_LEN], &[2; NONCE_LEN], &endpoint(1), 11),
        ] {
            assert!(!other.client_proved(token, &proof));
        }
        assert!(!base.responder_proved(token, &endpoint(1), &proof));
        let responder = base.responder_proof(token, &endpoint(2));
        assert!(!base.responder_proved(token, &endpoint(3), &responder));
        assert!(!base.client_proved(token, &responder));
    }

    #[test]
    fn nonces_differ() {
        assert_ne!(nonce().unwrap(), nonce().unwrap());
    }
}
