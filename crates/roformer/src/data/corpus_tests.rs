use super::*;
use test_support::Scratch;

use crate::data::test_util::{poetry_dir, poetry_sample};

fn texts(docs: &[Document]) -> Vec<&str> {
    docs.iter().map(|doc| doc.text.as_str()).collect()
}

fn jsonl() -> CorpusFormat {
    CorpusFormat::JsonLines {
        field: "text".into(),
    }
}

#[test]
fn formats_are_detected_from_the_extension() {
    assert_eq!(CorpusFormat::detect(Path::new("a/b.jsonl")), jsonl());
    assert_eq!(
        CorpusFormat::detect(Path::new("poet.tang.0.json")),
        CorpusFormat::ChinesePoetry
    );
    assert_eq!(
        CorpusFormat::detect(Path::new("x.txt")),
        CorpusFormat::Lines
    );
    assert_eq!(
        CorpusFormat::detect(Path::new("LICENSE")),
        CorpusFormat::Lines
    );
}

#[test]
fn lines_and_paragraphs() {
    let dir = Scratch::new("roformer-data", "lines");
    let file = dir.write("c.txt", "first line\n\n  second  \r\n\nthird\nfourth\n");
    let docs = read_corpus(&file, None).unwrap();
    assert_eq!(texts(&docs), ["first line", "second", "third", "fourth"]);
    let docs = read_corpus(&file, Some(&CorpusFormat::Paragraphs)).unwrap();
    assert_eq!(texts(&docs), ["first line", "second", "third\nfourth"]);
    assert_eq!(docs[0].title, None);
}

#[test]
fn json_lines_take_the_named_field() {
    let dir = Scratch::new("roformer-data", "jsonl");
    let file = dir.write(
        "c.jsonl",
        "{\"text\": \" a \", \"body\": \"x\"}\n\n{\"text\": \"b\", \"body\": \"y\"}\n",
    );
    assert_eq!(texts(&read_corpus(&file, None).unwrap()), ["a", "b"]);
    let body = CorpusFormat::JsonLines {
        field: "body".into(),
    };
    assert_eq!(texts(&read_corpus(&file, Some(&body)).unwrap()), ["x", "y"]);
}

#[test]
fn json_lines_errors_name_the_line() {
    let dir = Scratch::new("roformer-data", "jsonl-errors");
    let bad = dir.write("bad.jsonl", "{\"text\": \"a\"}\n\n{\"text\": \"b\"\n");
    let err = read_corpus(&bad, None).unwrap_err();
    assert!(
        matches!(&err, DataError::BadJson { line: 3, path, .. } if *path == bad),
        "{err:?}"
    );
    assert!(err.to_string().contains("line 3"), "{err}");

    let missing = dir.write("missing.jsonl", "{\"text\": \"a\"}\n{\"body\": \"b\"}\n");
    let err = read_corpus(&missing, None).unwrap_err();
    assert!(
        matches!(&err, DataError::MissingField { record: Record::Line(2), field, .. } if field == "text"),
        "{err:?}"
    );
    let wrong_type = dir.write("number.jsonl", "{\"text\": 3}\n");
    let err = read_corpus(&wrong_type, None).unwrap_err();
    assert!(
        err.to_string().contains("line 1 has no \"text\" field"),
        "{err}"
    );
}

#[test]
fn the_poetry_sample_reads_with_titles_and_authors() {
    let docs = poetry_sample();
    assert_eq!(docs.len(), 300);
    // Path order: quantangshi/poet.song.0.json, quantangshi/poet.tang.0.json, songci/...
    let song = &docs[0];
    assert_eq!(song.author.as_deref(), Some("宋太祖"));
    assert_eq!(song.title.as_deref(), Some("日詩"));
    assert_eq!(
        song.text,
        "欲出未出光辣達，千山萬山如火發。須臾走向天上來，逐却殘星趕却月。"
    );
    let tang = &docs[100];
    assert_eq!(tang.author.as_deref(), Some("太宗皇帝"));
    assert!(tang.text.starts_with("秦川雄帝宅，函谷壯皇居。綺殿千尋起"));
    // A ci has no title: its tune (rhythmic) stands in.
    let ci = &docs[250];
    assert_eq!(ci.title.as_deref(), Some("导引"));
    assert_eq!(ci.author.as_deref(), Some("和岘"));
}

#[test]
fn poetry_errors() {
    let dir = Scratch::new("roformer-data", "poetry-errors");
    let bad = dir.write(
        "bad.json",
        "[\n  {\"paragraphs\": [\"a\"]},\n  {\"paragraphs\": [\"b\"]\n]\n",
    );
    let err = read_corpus(&bad, None).unwrap_err();
    assert!(matches!(err, DataError::BadJson { line: 4, .. }), "{err:?}");

    let object = dir.write("object.json", "{\"paragraphs\": [\"a\"]}");
    let err = read_corpus(&object, None).unwrap_err();
    assert!(matches!(err, DataError::NotAnArray { .. }), "{err:?}");

    let missing = dir.write(
        "missing.json",
        "[{\"paragraphs\": [\"a\"]}, {\"title\": \"t\"}, {\"paragraphs\": [1]}]",
    );
    let err = read_corpus(&missing, None).unwrap_err();
    assert!(
        matches!(&err, DataError::MissingField { record: Record::Element(1), field, .. } if field == "paragraphs"),
        "{err:?}"
    );
    let not_strings = dir.write("numbers.json", "[{\"paragraphs\": [1]}]");
    let err = read_corpus(&not_strings, None).unwrap_err();
    assert!(
        err.to_string()
            .contains("element 0 has no \"paragraphs\" field holding an array of strings"),
        "{err}"
    );
}

#[test]
fn empty_and_blank_corpora() {
    let dir = Scratch::new("roformer-data", "empty");
    let empty = dir.write("empty.txt", "");
    let err = read_corpus(&empty, None).unwrap_err();
    assert!(matches!(err, DataError::EmptyCorpus { .. }), "{err:?}");
    let err = read_corpus(&dir.write("empty.json", "[]"), None).unwrap_err();
    assert!(matches!(err, DataError::EmptyCorpus { .. }), "{err:?}");

    let blank = dir.write("blank.txt", "  \n\t\n");
    let err = read_corpus(&blank, None).unwrap_err();
    assert!(
        matches!(err, DataError::NoUsableDocument { records: 2, .. }),
        "{err:?}"
    );
    let blank_poem = dir.write("blank.json", "[{\"paragraphs\": [\" \", \"\"]}]");
    let err = read_corpus(&blank_poem, None).unwrap_err();
    assert!(
        matches!(err, DataError::NoUsableDocument { records: 1, .. }),
        "{err:?}"
    );

    let no_files = Scratch::new("roformer-data", "no-files");
    no_files.write("README.md", "not a corpus file");
    let err = read_corpus(no_files.path(), None).unwrap_err();
    assert!(matches!(err, DataError::EmptyCorpus { .. }), "{err:?}");
}

#[test]
fn unreadable_and_non_utf8_files() {
    let dir = Scratch::new("roformer-data", "unreadable");
    let err = read_corpus(&dir.path().join("absent.txt"), None).unwrap_err();
    assert!(matches!(err, DataError::Io { .. }), "{err:?}");
    let latin1 = dir.write("latin1.txt", b"ok\nstill ok\ncaf\xe9\n");
    let err = read_corpus(&latin1, None).unwrap_err();
    assert!(matches!(err, DataError::NotUtf8 { line: 3, .. }), "{err:?}");
}

#[test]
fn directories_are_read_recursively_in_path_order() {
    let dir = Scratch::new("roformer-data", "tree");
    dir.write("b.txt", "b1\nb2\n");
    dir.write("a/z.jsonl", "{\"text\": \"z\"}\n");
    dir.write("a/deeper/p.json", "[{\"paragraphs\": [\"p1\", \"p2\"]}]");
    dir.write("a/README.md", "skipped");
    dir.write(".hidden.txt", "skipped");
    dir.write("LICENSE", "skipped");
    let docs = read_corpus(dir.path(), None).unwrap();
    assert_eq!(texts(&docs), ["p1p2", "z", "b1", "b2"]);
    // An explicit format applies to every file; the first bad one in path order is named.
    let err = read_corpus(dir.path(), Some(&CorpusFormat::ChinesePoetry)).unwrap_err();
    assert!(
        matches!(&err, DataError::NotAnArray { path } if path.ends_with("a/z.jsonl")),
        "{err:?}"
    );
    // A bad file anywhere fails the read.
    dir.write("a/deeper/q.json", "[");
    assert!(read_corpus(dir.path(), None).is_err());
}

#[test]
fn the_fixture_directory_skips_its_readme_and_license() {
    let docs = read_corpus(&poetry_dir(), Some(&CorpusFormat::ChinesePoetry)).unwrap();
    assert_eq!(docs.len(), 300);
}

/// The whole package as `scripts/fetch_chinese_poetry.sh` lays it out (ignored: it needs that
/// download, 85 MB).
#[test]
#[ignore = "needs scripts/fetch_chinese_poetry.sh"]
fn the_full_package_reads() {
    let poems = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../data/chinese-poetry/poems");
    let docs = read_corpus(&poems, None).unwrap();
    // The package announces about 55 000 Tang shi, 260 000 Song shi and 21 000 Song ci.
    assert!(docs.len() > 300_000, "{}", docs.len());
    let chars: usize = docs.iter().map(|d| d.text.chars().count()).sum();
    eprintln!("{} poems, {chars} chars", docs.len());
}
