//! Tests of [`super`]: couplets, the anthology reader and the seeded masks.

use super::*;

#[test]
fn couplets_end_at_sentence_ends() {
    assert_eq!(
        couplets("床前明月光，疑是地上霜。舉頭望明月，低頭思故鄉。"),
        ["床前明月光，疑是地上霜。", "舉頭望明月，低頭思故鄉。"]
    );
    assert_eq!(
        couplets("春草明年綠，王孫歸不歸？君自故鄉來，應知故鄉事；天長地久有時盡！此恨綿綿"),
        [
            "春草明年綠，王孫歸不歸？",
            "君自故鄉來，應知故鄉事；",
            "天長地久有時盡！",
            "此恨綿綿"
        ]
    );
    assert_eq!(
        couplets("何所慰吾誠?使我不得開心顏!"),
        ["何所慰吾誠?", "使我不得開心顏!"]
    );
    assert!(couplets("").is_empty());
    assert!(couplets("。，！ ").is_empty());
}

#[test]
fn notes_and_whitespace_are_removed() {
    // A note in either bracket width, one spanning paragraphs, one with a ； inside (not
    // a couplet end), spaces between.
    let poem = [
        "春草明年綠，王孫歸不歸？(明年 一作：年年)",
        "孤帆遠影碧空盡，唯見長江天際流。 (唯 通：惟)",
        "回樂烽前沙似雪，受降城外月如霜。(回樂",
        "一作：回樂",
        "）",
        "落魄江南載酒行，楚腰纖細掌中輕。(江南 一作：江湖；纖細 一作：腸斷)",
    ]
    .concat();
    assert_eq!(
        couplets(&poem),
        [
            "春草明年綠，王孫歸不歸？",
            "孤帆遠影碧空盡，唯見長江天際流。",
            "回樂烽前沙似雪，受降城外月如霜。",
            "落魄江南載酒行，楚腰纖細掌中輕。"
        ]
    );
    assert_eq!(couplets("甲乙，丙丁。(未完"), ["甲乙，丙丁。"]);
    assert_eq!(couplets("甲乙，丙丁。)戊己。"), ["甲乙，丙丁。", "戊己。"]);
}

#[test]
fn the_anthology_is_read_poem_by_poem() {
    let json = r#"{"title": "唐詩三百首", "content": [
        {"type": "五言絕句", "content": [
            {"chapter": "登鸛雀樓", "subchapter": null, "author": "王之渙",
             "paragraphs": ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層樓。"]}]},
        {"type": "七言絕句", "content": [
            {"chapter": "出塞", "author": "王昌齡",
             "paragraphs": ["秦時明月漢時關，萬里長征人未還。"]}]}]}"#;
    let got = parse_couplets(json).unwrap();
    assert_eq!(got.len(), 3);
    assert_eq!(got[1].text, "欲窮千里目，更上一層樓。");
    assert_eq!(got[1].poem, "登鸛雀樓 (王之渙)");
    assert_eq!(got[2].poem, "出塞 (王昌齡)");
}

#[test]
fn bad_anthologies_are_errors() {
    let message = |json: &str| format!("{:#}", parse_couplets(json).unwrap_err());
    assert!(message("{").contains("not the Three Hundred Tang Poems JSON"));
    assert!(message(r#"{"content": [{"content": [{"chapter": "x"}]}]}"#).contains("paragraphs"));
    assert!(message(r#"{"content": []}"#).contains("no poem"));
    assert!(message(r#"{"content": [{"content": []}]}"#).contains("no poem"));
    let empty = r#"{"content": [{"content": [
        {"chapter": "甲", "author": "乙", "paragraphs": ["。"]}]}]}"#;
    assert!(message(empty).contains("甲 (乙), has no text"));
    let err = read_couplets(Path::new("/nonexistent/famous.json")).unwrap_err();
    assert!(format!("{err:#}").contains("/nonexistent/famous.json"));
}

fn tokenizer() -> RoFormerTokenizer {
    let mut vocab = vec!["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "，", "。"];
    vocab.extend("白日依山盡黃河入海流欲窮千里目更上一層樓尽黄层楼穷".split(""));
    vocab.retain(|t| !t.is_empty());
    RoFormerTokenizer::from_texts(&(vocab.join("\n") + "\n"), None).unwrap()
}

fn couplets_of(texts: &[&str]) -> Vec<Couplet> {
    texts
        .iter()
        .map(|t| Couplet {
            text: (*t).to_owned(),
            poem: "p".into(),
        })
        .collect()
}

/// One character masked per couplet and script, chosen by the seed alone: the same seed
/// gives the same masks, another seed other masks; both scripts mask the same position.
#[test]
fn masks_are_one_character_per_couplet_and_seeded() {
    let tok = tokenizer();
    let texts = ["白日依山盡，黃河入海流。", "欲窮千里目，更上一層樓。"];
    let many: Vec<&str> = texts.iter().copied().cycle().take(40).collect();
    let couplets = couplets_of(&many);
    let positions = |seed| -> Vec<usize> {
        let masked = mask_couplets(&tok, &couplets, 64, seed).unwrap();
        assert_eq!(masked.len(), 80);
        for m in &masked {
            let [(p, target)] = m.targets[..] else {
                panic!("not one mask: {:?}", m.targets)
            };
            assert_eq!(m.ids[p], 4, "[MASK] is id 4");
            assert_eq!(m.ids.iter().filter(|&&id| id == 4).count(), 1);
            assert!(is_character(tok.id_to_token(target).unwrap()));
        }
        let (orig, copies) = masked.split_at(40);
        assert!(orig.iter().all(|m| !m.copy) && copies.iter().all(|m| m.copy));
        assert_eq!(
            orig.iter().map(|m| m.targets[0].0).collect::<Vec<_>>(),
            copies.iter().map(|m| m.targets[0].0).collect::<Vec<_>>()
        );
        // The copy masks the simplified form of the same character.
        let simplified_target = tok.id_to_token(copies[1].targets[0].1).unwrap();
        let original_target = tok.id_to_token(orig[1].targets[0].1).unwrap();
        assert_eq!(simplified_target, to_simplified(original_target));
        orig.iter().map(|m| m.targets[0].0).collect()
    };
    let a = positions(7);
    assert_eq!(a, positions(7));
    assert_ne!(a, positions(8));
    // 40 couplets of 10 characters: the draw is not stuck on one position.
    let mut distinct = a.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert!(distinct.len() >= 5, "{a:?}");
}

#[test]
fn couplets_without_a_known_character_are_left_out() {
    let tok = tokenizer();
    let masked = mask_couplets(&tok, &couplets_of(&["天地，玄黃。"]), 64, 0).unwrap();
    // 天 地 玄 are [UNK]; 黃 is known (and 黄 in the copy).
    assert_eq!(masked.len(), 2);
    let masked = mask_couplets(&tok, &couplets_of(&["天地，玄宇。"]), 64, 0).unwrap();
    assert!(masked.is_empty());
}
