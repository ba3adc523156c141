//! Text embedding (skeleton).
