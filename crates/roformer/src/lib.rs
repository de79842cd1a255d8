//! RoFormer on candle.
