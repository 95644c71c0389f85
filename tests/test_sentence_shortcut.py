"""`has_enough_sentences` skips Punkt when >= 3 lines survive cleaning; it must decide as the full count does."""
from c4prep.pipelines import c4_rules
from c4prep.pipelines.readers import read_records
from c4prep.pipelines.sentences import split_sentences


def test_shortcut_equals_full_punkt_count_on_real_pages(webdata):
    records = read_records(str(webdata / "CC-MAIN-2019-30-sample-a.warc.wet.gz"), open_binary=lambda p: open(p, "rb"))
    checked = 0
    for record in records:
        page = c4_rules.parse_record(record).page
        # A splitter that always reports plenty of sentences exposes every page's kept lines.
        kept = c4_rules.clean_page(page, sentence_splitter=lambda line: [line] * 3).page
        if kept is None:
            continue
        lines = kept.text.split("\n")
        assert all(split_sentences(line) for line in lines)  # the shortcut's premise: no kept line is sentence-free
        full_count = sum(len(split_sentences(line)) for line in lines)
        assert c4_rules.has_enough_sentences(lines) == (full_count >= c4_rules.MIN_NUM_SENTENCES)
        checked += 1
    assert checked > 150


def test_shortcut_runs_punkt_when_few_lines_survive():
    assert not c4_rules.has_enough_sentences(["One sentence here, Dr. Roberts!", "And a second one here."])
    assert c4_rules.has_enough_sentences(["First sentence is here. Second one follows here.", "A third one is here."])
