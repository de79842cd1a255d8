use std::collections::BTreeSet;

use super::*;

/// Three collections of `poets` poets each (`tang-shi-p0`, ...), poet `i` with `8 + i % 5`
/// poems; a poem's text names its poet, so that every text's author can be checked.
fn corpus(poets: usize) -> Vec<Collection> {
    COLLECTIONS
        .iter()
        .map(|(label, _)| Collection {
            label: label.to_string(),
            poets: (0..poets)
                .map(|i| {
                    let poet = format!("{label}-p{i}");
                    let poems = (0..8 + i % 5).map(|j| format!("<{poet}:{j}>")).collect();
                    (poet, poems)
                })
                .collect(),
        })
        .collect()
}

fn sizes(poems_per_doc: usize, train: usize, dev: usize) -> Sizes {
    Sizes {
        poems_per_doc,
        max_per_poet: 2,
        train_per_class: train,
        dev_per_class: dev,
        dev_poets: 0.4,
    }
}

/// The poets of a side's items.
fn poets(items: &[Item]) -> BTreeSet<&str> {
    items
        .iter()
        .flat_map(|i| i.poets.iter().map(String::as_str))
        .collect()
}

/// The poets named in a text (`<poet:j>` poems).
fn authors(text: &str) -> BTreeSet<&str> {
    text.split('<')
        .filter_map(|p| p.split(':').next())
        .filter(|p| !p.is_empty())
        .collect()
}

#[test]
fn collection_documents_are_balanced_with_no_poet_on_both_sides() {
    let d = collection_dataset(&corpus(40), &sizes(4, 12, 8)).unwrap();
    assert_eq!(d.labels, ["tang-shi", "song-shi", "song-ci"]);
    for (items, want) in [(&d.train, 12), (&d.dev, 8)] {
        assert_eq!(items.len(), 3 * want);
        for label in 0..3 {
            assert_eq!(items.iter().filter(|i| i.label == label).count(), want);
        }
        for i in items.iter() {
            // One poet's four consecutive poems, from the collection of its label.
            assert_eq!(
                authors(&i.segments[0]),
                BTreeSet::from([i.poets[0].as_str()])
            );
            assert_eq!(i.segments[0].matches('<').count(), 4);
            assert!(i.poets[0].starts_with(&d.labels[i.label]));
        }
    }
    assert!(poets(&d.train).is_disjoint(&poets(&d.dev)));
    // The same corpus and sizes give the same dataset.
    let again = collection_dataset(&corpus(40), &sizes(4, 12, 8)).unwrap();
    assert_eq!(again.dev, d.dev);
}

#[test]
fn a_dataset_short_of_what_was_asked_is_refused_saying_what_it_could_have() {
    // 10 poets per collection, 2 documents each at most: about 8 dev documents per class.
    let err = collection_dataset(&corpus(10), &sizes(4, 5, 350))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("dev: ") && err.contains("fewer than --dev-per-class 350"),
        "{err}"
    );
    assert!(err.contains("song-ci documents") && err.contains("--max-per-poet (2)"));
    assert!(err.contains("raise --dev-poets (0.4)"), "{err}");
    assert!(!err.contains("train:"), "training has its 5: {err}");
    let err = authorship_dataset(&corpus(10), &sizes(2, 500, 1))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("train: ") && err.contains("the 1000 that --train-per-class 500 asks"),
        "{err}"
    );
    assert!(err.contains("lower --dev-poets (0.4)"), "{err}");
}

#[test]
fn authorship_labels_name_the_anchor_poets_candidate_balanced_and_split_by_poet() {
    let d = authorship_dataset(&corpus(40), &sizes(3, 20, 15)).unwrap();
    assert_eq!(d.labels, ["first", "second"]);
    for (items, want) in [(&d.train, 20), (&d.dev, 15)] {
        assert_eq!(items.len(), 2 * want);
        assert_eq!(items.iter().filter(|i| i.label == 0).count(), want);
        assert_eq!(items.iter().filter(|i| i.label == 1).count(), want);
        for i in items.iter() {
            let [anchor, first, second] = &i.segments[..] else {
                panic!("three texts: {i:?}")
            };
            let (x, chosen, other) = match i.label {
                0 => (authors(anchor), authors(first), authors(second)),
                _ => (authors(anchor), authors(second), authors(first)),
            };
            assert_eq!(x.len(), 1, "one poet's anchor: {anchor}");
            assert_eq!(
                chosen, x,
                "the labelled candidate is the anchor poet's: {i:?}"
            );
            assert_eq!(other.len(), 1);
            assert_ne!(other, x, "the other candidate is another poet's: {i:?}");
            // Same collection; three poems each; the candidate is not the anchor.
            let y = other.first().unwrap();
            assert!(y.starts_with(&i.collection));
            assert!(i.segments.iter().all(|s| s.matches('<').count() == 3));
            assert_ne!(anchor, if i.label == 0 { first } else { second });
            // The recorded poets agree with the texts.
            assert_eq!(
                authors(&i.segments[1 + i.label]),
                BTreeSet::from([i.poets[1 + i.label].as_str()])
            );
        }
    }
    assert!(poets(&d.train).is_disjoint(&poets(&d.dev)));
}

#[test]
fn authorship_texts_share_the_max_length_and_keep_their_separators() {
    let d = authorship_dataset(&corpus(40), &sizes(3, 5, 5)).unwrap();
    assert_eq!(share(3, 128), Some(41));
    assert_eq!(share(1, 128), None);
    for length in [16, 128] {
        let l = line(&d.dev[0], &d.labels, length, "[SEP]");
        let pair = l.text_pair.as_deref().unwrap();
        let parts: Vec<&str> = pair.split("[SEP]").collect();
        assert_eq!(parts.len(), 2, "{pair}");
        let n = (length - 4) / 3;
        for text in [l.text.as_str(), parts[0], parts[1]] {
            assert_eq!(text.chars().count(), n.min(text.chars().count()));
            assert!(text.chars().count() <= n);
        }
        // [CLS] + three texts + three [SEP] fit: a character is at most a token.
        assert!(
            l.text.chars().count() + parts[0].chars().count() + parts[1].chars().count() + 4
                <= length
        );
        assert_eq!(l.label, d.labels[d.dev[0].label]);
    }
    // A collection document is written whole (the tokenizer cuts it).
    let c = collection_dataset(&corpus(40), &sizes(4, 2, 2)).unwrap();
    let l = line(&c.dev[0], &c.labels, 16, "[SEP]");
    assert_eq!(l.text, c.dev[0].segments[0]);
    assert!(l.text_pair.is_none());
}

#[test]
fn a_poet_is_on_one_side_in_either_script() {
    for dev_poets in [0.1, 0.3, 0.5, 0.7, 0.9] {
        for (traditional, simplified) in [("蘇軾", "苏轼"), ("陸游", "陆游"), ("黃庭堅", "黄庭坚")]
        {
            assert_eq!(
                Side::of(traditional, dev_poets),
                Side::of(simplified, dev_poets),
                "{traditional} at {dev_poets}"
            );
        }
    }
}
