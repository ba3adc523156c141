//! The one error type of payloads and filters ([`PayloadError`]): user
//! and data errors, each naming the column it is about.

/// A user or data error about payloads or filters. Every variant that is
/// about one column names it.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PayloadError {
    /// A filter names a column the collection does not have.
    #[error("field {field:?}: no such payload field (fields: {known})")]
    UnknownField {
        /// The name given.
        field: String,
        /// The fields that exist, comma separated.
        known: String,
    },
    /// A write gives a column a type other than the one it has.
    #[error("field {field:?}: the collection stores it as {existing}, this write gives {given}")]
    TypeConflict {
        /// The column.
        field: String,
        /// Its type in the collection.
        existing: &'static str,
        /// The type written.
        given: String,
    },
    /// A value does not fit its column or operator.
    #[error("field {field:?}: {reason}")]
    Value {
        /// The column.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// A filter names an operator that does not exist or does not apply.
    #[error("field {field:?}: operator {op:?} {reason}")]
    Operator {
        /// The column.
        field: String,
        /// The operator given.
        op: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A filter that is not of the documented shape.
    #[error("invalid filter: {0}")]
    Filter(String),
    /// Payload input that cannot be read (bad Arrow, wrong row count, ...).
    #[error("invalid payload: {0}")]
    Malformed(String),
}

pub(super) fn malformed(s: impl Into<String>) -> PayloadError {
    PayloadError::Malformed(s.into())
}
