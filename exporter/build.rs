//! Records what `--version` and `hpcnode_build_info` say about this build: the git revision
//! ("unknown" outside a git checkout), the build date (`SOURCE_DATE_EPOCH` when set, as
//! packaging/build.sh sets it to the commit's time, so packages are reproducible), the target,
//! and the glibc floor packaging/build.sh pins with cargo-zigbuild (`HPCNODE_GLIBC_FLOOR`).
use std::process::Command;
use std::time::{SystemTime, UNIX_EPOCH};

fn main() {
    let revision = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map(|rev| rev.trim().to_string())
        .filter(|rev| !rev.is_empty())
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=HPCNODE_REVISION={revision}");
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|seconds| seconds.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs())
        });
    println!("cargo:rustc-env=HPCNODE_BUILD_DATE={}", utc_date(epoch));
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=HPCNODE_TARGET={target}");
    // A plain `cargo build` links against the build host's glibc: no floor is pinned, and the
    // binary may need that host's glibc version.
    let glibc = std::env::var("HPCNODE_GLIBC_FLOOR")
        .unwrap_or_else(|_| "not pinned (the build host's)".to_string());
    println!("cargo:rustc-env=HPCNODE_GLIBC_FLOOR={glibc}");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");
    println!("cargo:rerun-if-env-changed=HPCNODE_GLIBC_FLOOR");
    println!("cargo:rerun-if-changed=../.git/HEAD");
    println!("cargo:rerun-if-changed=../.git/refs/heads");
}

/// `YYYY-MM-DD` in UTC for seconds since the epoch (Howard Hinnant's civil_from_days).
fn utc_date(epoch: u64) -> String {
    let days = (epoch / 86_400) as i64 + 719_468;
    let era = days.div_euclid(146_097);
    let day_of_era = days.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 {
        month_index + 3
    } else {
        month_index - 9
    };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
