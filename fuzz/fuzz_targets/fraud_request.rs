//! The fraud service's request body (`crates/sagitta-fraud`, a binary: its
//! readers are compiled in here from their files). Its fast path
//! (`fastpath.rs`) either gives up (`None`, the body goes to serde) or
//! reads exactly what serde reads: every field the same, the known
//! merchants the same list. And whichever path reads it, the answer (the
//! vector's grid codes, or the error) is the serde path's.
#![no_main]

#[allow(dead_code)]
#[path = "../../crates/sagitta-fraud/src/fastpath.rs"]
mod fastpath;
#[allow(dead_code)]
#[path = "../../crates/sagitta-fraud/src/fields.rs"]
mod fields;
#[allow(dead_code)]
#[path = "../../crates/sagitta-fraud/src/vectorize.rs"]
mod vectorize;

use fields::{Fields, Known};
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;
use std::sync::OnceLock;
use vectorize::{Norms, Rules};

/// The contest's constants (`normalization.json`, `mcc_risk.json`).
fn rules() -> &'static Rules {
    static R: OnceLock<Rules> = OnceLock::new();
    R.get_or_init(|| Rules {
        norms: Norms {
            max_amount: 10_000.0,
            max_installments: 12.0,
            amount_vs_avg_ratio: 10.0,
            max_minutes: 1440.0,
            max_km: 1000.0,
            max_tx_count_24h: 20.0,
            max_merchant_avg_amount: 10_000.0,
        },
        mcc_risk: [("5411", 0.15), ("5812", 0.30), ("7995", 0.85)]
            .into_iter()
            .map(|(m, r)| (m.to_string(), r))
            .collect::<HashMap<_, _>>(),
    })
}

/// The known merchants as a list of strings, however they were read.
fn known(k: &Known<'_>) -> Vec<String> {
    match k {
        Known::Decoded(list) => list.iter().map(|m| m.to_string()).collect(),
        Known::Plain(text) => text
            .split(|&c| c == b'"')
            .skip(1)
            .step_by(2)
            .map(|m| String::from_utf8_lossy(m).into_owned())
            .collect(),
    }
}

/// Every field but the known merchants, numbers by their bits.
fn rest(f: &Fields<'_>) -> String {
    let b = |x: f64| x.to_bits();
    format!(
        "{:?}",
        (
            (b(f.amount), b(f.installments), f.requested_at),
            (b(f.avg_amount), b(f.tx_count_24h)),
            (f.merchant_id, f.mcc, b(f.merchant_avg)),
            (f.is_online, f.card_present, b(f.km_from_home)),
            f.last.map(|(t, km)| (t, b(km))),
        )
    )
}

fuzz_target!(|data: &[u8]| {
    if let Some(fast) = fastpath::read(data) {
        let r: vectorize::Request<'_> = match serde_json::from_slice(data) {
            Ok(r) => r,
            Err(e) => panic!("the fast path read a body serde refuses: {e}"),
        };
        let slow = Fields::from(&r);
        assert_eq!(rest(&fast), rest(&slow));
        assert_eq!(known(&fast.known), known(&slow.known));
        // The merchant check itself, on both readings.
        assert_eq!(
            fast.known.contains(fast.merchant_id),
            slow.known.contains(slow.merchant_id)
        );
    }
    assert_eq!(
        vectorize::vectorize(data, rules()),
        vectorize::vectorize_serde(data, rules())
    );
});
