//! What a request's vector is made of, whichever reader read the body
//! (`crate::fastpath` or serde in `crate::vectorize`).

use std::borrow::Cow;

/// What the vector is made of, however the body was read.
#[derive(Debug, PartialEq)]
pub struct Fields<'a> {
    pub amount: f64,
    pub installments: f64,
    pub requested_at: &'a str,
    pub avg_amount: f64,
    pub tx_count_24h: f64,
    pub known: Known<'a>,
    pub merchant_id: &'a str,
    pub mcc: &'a str,
    pub merchant_avg: f64,
    pub is_online: bool,
    pub card_present: bool,
    pub km_from_home: f64,
    /// The previous transaction's timestamp and distance.
    pub last: Option<(&'a str, f64)>,
}

/// The customer's known merchants.
#[derive(Debug, PartialEq)]
pub enum Known<'a> {
    /// As serde decoded them.
    Decoded(&'a [Cow<'a, str>]),
    /// The text between the brackets of an array of plain strings (no
    /// escapes; `crate::fastpath` checked it).
    Plain(&'a [u8]),
}

impl Known<'_> {
    pub fn contains(&self, id: &str) -> bool {
        match self {
            Known::Decoded(list) => list.iter().any(|m| m == id),
            // Between the brackets: `"a", "b"`; every other piece split
            // at the quotes is a string.
            Known::Plain(text) => text
                .split(|&c| c == b'"')
                .skip(1)
                .step_by(2)
                .any(|m| m == id.as_bytes()),
        }
    }
}
