//! One masked text, and which tokens may be masked.

use super::neighbour::Context;

/// One encoded text with its masks: a held-out document or a couplet.
pub(super) struct Masked {
    /// The ids the model sees, `[MASK]` at every target.
    pub ids: Vec<u32>,
    /// (position, original id)
    pub targets: Vec<(usize, u32)>,
    /// A simplified copy (not an original text).
    pub copy: bool,
    /// How errors name the text.
    pub name: String,
}

impl Masked {
    /// The tokens left and right of `position` as the model sees them; a masked one is unknown.
    pub fn context(&self, position: usize, mask_id: u32) -> Context {
        let known = |i: Option<usize>| {
            i.and_then(|i| self.ids.get(i))
                .copied()
                .filter(|&id| id != mask_id)
        };
        Context {
            left: known(position.checked_sub(1)),
            right: known(position.checked_add(1)),
        }
    }
}

/// Whether `token` is one alphabetic character (a Chinese character, not punctuation).
pub(super) fn is_character(token: &str) -> bool {
    let mut chars = token.chars();
    matches!((chars.next(), chars.next()), (Some(c), None) if c.is_alphabetic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn characters_are_single_letters() {
        assert!(is_character("月"));
        assert!(is_character("a"));
        assert!(!is_character("，"));
        assert!(!is_character("。"));
        assert!(!is_character("[UNK]"));
        assert!(!is_character("##a"));
        assert!(!is_character(""));
    }

    #[test]
    fn a_masked_neighbour_is_unknown() {
        let m = Masked {
            ids: vec![2, 10, 4, 4, 11, 3],
            targets: vec![(2, 20), (3, 21)],
            copy: false,
            name: String::new(),
        };
        let c = m.context(2, 4);
        assert_eq!((c.left, c.right), (Some(10), None));
        let c = m.context(3, 4);
        assert_eq!((c.left, c.right), (None, Some(11)));
        let c = m.context(5, 4);
        assert_eq!((c.left, c.right), (Some(11), None));
    }
}
