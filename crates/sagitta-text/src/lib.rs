//! Full text (skeleton).
