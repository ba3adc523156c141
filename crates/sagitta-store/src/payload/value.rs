//! One payload value ([`Value`]) and a row of them ([`Row`]).

/// One payload value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Missing.
    Null,
    /// int64.
    Int(i64),
    /// float64.
    Float(f64),
    /// bool.
    Bool(bool),
    /// string.
    Str(String),
    /// timestamp, µs since the epoch (UTC).
    Timestamp(i64),
    /// tags.
    Tags(Vec<String>),
}

impl Value {
    /// Whether this is [`Value::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }
}

/// Payload values of one row, by schema position; a row shorter than the
/// schema reads the missing trailing fields as null.
pub type Row = Box<[Value]>;
