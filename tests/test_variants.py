"""Corpus variants: presets, the RealNews domain rule, the WebText URL join, noclean and noblocklist runs."""
import json

import pyarrow as pa
import pytest

from c4prep.manifest import read_manifest
from c4prep.pipelines import c4_rules
from c4prep.pipelines.run_c4 import RunConfig, run_c4
from c4prep.pipelines.variants import VariantError, load_variant, preset_names

SAMPLE = "CC-MAIN-2019-30-sample-a.warc.wet.gz"


def page_at(url: str, text: str = "Some text here.") -> c4_rules.Page:
    return c4_rules.Page(url, c4_rules.normalize_url(url), text, "2019-07-17T12:00:00Z", "text/plain", len(text))


def output_urls(folder) -> set[str]:
    urls = set()
    for path in sorted(folder.glob("data-*/*.arrow")):
        with pa.memory_map(str(path)) as source:
            urls.update(pa.ipc.open_stream(source).read_all().column("url").to_pylist())
    return urls


@pytest.fixture(scope="module")
def c4_texts(webdata) -> list[str]:
    """Real English texts that pass every C4 rule (released C4 documents)."""
    with open(webdata / "c4-en-train-00000-first500.jsonl", encoding="utf-8") as handle:
        return [json.loads(line)["text"] for line in handle][:40]


def write_jsonl(path, urls_and_texts) -> str:
    with open(path, "w", encoding="utf-8") as handle:
        for url, text in urls_and_texts:
            handle.write(json.dumps({"url": url, "text": text, "timestamp": "2019-07-17T12:00:00Z"}) + "\n")
    return str(path)


def test_presets_load_and_differ():
    assert preset_names() == ["en", "en.noblocklist", "en.noclean", "realnewslike", "webtextlike"]
    en, noclean = load_variant("en"), load_variant("en.noclean")
    assert (en.clean, en.dedup, en.badwords) == (True, "sentences", True)
    assert (noclean.clean, noclean.dedup, noclean.badwords) == (False, "none", False)
    assert load_variant("en.noblocklist").badwords is False
    assert load_variant("realnewslike").realnews_domains == "bundled"


@pytest.mark.parametrize("name, overrides, message", [
    ("nope", {}, "unknown variant 'nope'"),
    ("en", {"dedup": "words"}, "dedup must be one of lines, sentences, none"),
    ("en", {"colour": "red"}, "Key 'colour' not in 'CorpusVariant'"),
    ("webtextlike", {}, "pass --webtext-urls FILE"),
    ("missing.yaml", {}, "variant file not found"),
])
def test_bad_variants_say_what_to_fix(name, overrides, message):
    with pytest.raises(VariantError, match=message):
        load_variant(name, overrides)


@pytest.mark.parametrize("text, message", [("description: mine\n", "Missing mandatory value: name"),
                                           ("", "Missing mandatory value: name"),
                                           ("name: ' '\n", "name is empty: give the corpus a name")])
def test_a_variant_file_without_a_name_is_refused(tmp_path, text, message):
    """It published a corpus named '???' (OmegaConf's missing value) in its card and manifest."""
    custom = tmp_path / "mine.yaml"
    custom.write_text(text)
    with pytest.raises(VariantError, match=message):
        load_variant(str(custom))


def test_an_overridden_stage_is_in_the_description_the_card_shows():
    """The card's headline said 'three-sentence-span dedup' for a run with --dedup none."""
    assert load_variant("en", {"dedup": "none"}).description.endswith("bad words (for this run: dedup: \"none\")")
    assert load_variant("en", {"dedup": "sentences"}).description == load_variant("en").description
    noclean = load_variant("en.noclean", {"dedup": "sentences", "near_dedup": True}).description
    assert noclean.endswith('(for this run: dedup: "sentences", near_dedup: true)')


def test_a_copied_preset_file_is_a_variant(tmp_path):
    custom = tmp_path / "mine.yaml"
    custom.write_text("name: mine\ndedup: lines\nbadwords: false\n")
    variant = load_variant(str(custom))
    assert (variant.name, variant.dedup, variant.badwords, variant.clean) == ("mine", "lines", False, True)


@pytest.mark.parametrize("url, counter", [
    ("https://www.nytimes.com/2019/07/17/world/story.html", "passed"),  # value true: any subdomain
    ("https://nytimes.com/x", "passed"),
    ("https://current.newsweek.com/story", "passed"),  # listed subdomain
    ("https://www.newsweek.com/story", "filtered:bad_subdomain"),  # www is stripped: "" is not listed
    ("https://today.msnbc.msn.com/id/1", "passed"),  # multi-label subdomains compare as whole strings
    ("https://www.msn.com/id/1", "filtered:bad_subdomain"),
    ("http://www.bbc.co.uk/news/uk", "passed"),  # public suffix co.uk from the bundled list
    ("https://example.org/news", "filtered:bad_domain"),
])
def test_realnews_domain_rule(url, counter):
    domains = c4_rules.load_realnews_domains()
    assert len(domains) == 5036
    outcome = c4_rules.check_realnews_domain(page_at(url), domains)
    assert outcome.counters == {counter: 1}
    assert (outcome.page is not None) == (counter == "passed")


def test_webtext_join_decisions():
    page = page_at("https://a.com/x")
    assert c4_rules.join_webtext_urls([page], 2) == c4_rules.Outcome(page, {"passed": 1})
    assert c4_rules.join_webtext_urls([page], 0) == c4_rules.Outcome(None, {"filtered": 1})
    assert c4_rules.join_webtext_urls([], 1) == c4_rules.Outcome(None, {"missing-page": 1})


def test_webtextlike_run_keeps_exactly_the_listed_pages(tmp_path, shared_data, c4_texts):
    url_file = shared_data / "webtext" / "urls_karma3_2005-06_07.txt"
    all_listed = [line.strip() for line in open(url_file) if line.strip()]
    listed = [url for url in all_listed if url.startswith("http://www.") and "?" not in url][:10]
    # Crawled pages: 10 listed URLs written differently (https, no www, trailing slash, tracking tail),
    # and 10 URLs nobody submitted.
    variants = ("https://", "http://", "https://www.")
    crawled_listed = [variants[i % 3] + url[len("http://www."):] + ("/?utm_source=rss" if i % 2 else "/")
                      for i, url in enumerate(listed)]
    unlisted = [f"https://unlisted-{i}.example.com/page" for i in range(10)]
    pages = list(zip(crawled_listed + unlisted, c4_texts[:20]))
    config = RunConfig(output=str(tmp_path / "out"), inputs=[write_jsonl(tmp_path / "pages.jsonl", pages)],
                       variant=load_variant("webtextlike", {"webtext_urls": [str(url_file)], "dedup": "none"}))
    result = run_c4(config)
    counters = read_manifest(config.output).counters["webtextlike-filter"]
    listed_keys = {c4_rules.normalize_url(url) for url in listed}
    assert len(listed_keys) == 10 and len(all_listed) == 840
    assert counters["passed"] == 10 and counters["filtered"] == 10
    distinct_listed_keys = {c4_rules.normalize_url(url) for url in all_listed}
    assert counters["missing-page"] == len(distinct_listed_keys) - 10
    assert {c4_rules.normalize_url(url) for url in output_urls(tmp_path / "out")} == listed_keys
    assert result.funnel.reconciled


def test_realnewslike_run(tmp_path, c4_texts):
    urls = ["https://www.nytimes.com/a", "https://www.newsweek.com/b", "https://current.newsweek.com/c",
            "https://www.example.org/d"]
    config = RunConfig(output=str(tmp_path / "out"),
                       inputs=[write_jsonl(tmp_path / "pages.jsonl", zip(urls, c4_texts))],
                       variant=load_variant("realnewslike", {"dedup": "none"}))
    result = run_c4(config)
    assert output_urls(tmp_path / "out") == {urls[0], urls[2]}
    assert read_manifest(config.output).counters["realnews-domain-filter"] == {
        "passed": 2, "filtered:bad_domain": 1, "filtered:bad_subdomain": 1}
    assert result.funnel.reconciled


def test_noclean_keeps_raw_english_pages(tmp_path, webdata):
    config = RunConfig(output=str(tmp_path / "out"), inputs=[str(webdata / SAMPLE)], variant=load_variant("en.noclean"))
    result = run_c4(config)
    counters = read_manifest(config.output).counters
    assert "clean-page" not in counters and "badwords-filter" not in counters
    assert result.funnel.reconciled
    assert result.funnel.pages_out == counters["english-filter"]["passed"] > 100
    assert read_manifest(config.output).config["variant"]["name"] == "en.noclean"


def test_noblocklist_is_a_superset_of_en(tmp_path, webdata):
    outputs = {}
    for name in ("en", "en.noblocklist"):
        config = RunConfig(output=str(tmp_path / name), inputs=[str(webdata / SAMPLE)],
                           variant=load_variant(name, {"dedup": "none"}))
        run_c4(config)
        outputs[name] = output_urls(tmp_path / name)
    dropped_by_badwords = read_manifest(str(tmp_path / "en")).counters["badwords-filter"]["filtered"]
    assert outputs["en"] < outputs["en.noblocklist"]
    assert len(outputs["en.noblocklist"]) - len(outputs["en"]) == dropped_by_badwords > 0


def _reposted(c4_texts) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(10 real documents, re-posted copies of 5 of them under other URLs with one extra line)."""
    long_texts = [text for text in c4_texts if len(text.split()) >= 200][:10]  # one line is a small change
    assert len(long_texts) == 10
    originals = [(f"https://site-{i}.example.com/post", text) for i, text in enumerate(long_texts)]
    reposts = [(f"https://mirror-{i}.example.net/copy", text + "\nShared from the original site with thanks.")
               for i, text in enumerate(long_texts[:5])]
    return originals, reposts


def test_near_dedup_stage_in_the_pipeline(tmp_path, c4_texts):
    """Re-posted copies of real documents under other URLs (one extra line) are removed; one copy survives."""
    originals, reposts = _reposted(c4_texts)
    config = RunConfig(output=str(tmp_path / "out"),
                       inputs=[write_jsonl(tmp_path / "pages.jsonl", originals + reposts)],
                       variant=load_variant("en", {"dedup": "none", "near_dedup": True}))
    result = run_c4(config)
    counters = read_manifest(config.output).counters["near-dedup"]
    assert counters["filtered:near_duplicate"] == 5 and counters["clusters"] == 5
    assert result.funnel.pages_out == 10 and result.funnel.reconciled
    kept = output_urls(tmp_path / "out")
    for i in range(5):  # exactly one page of each pair survives: the one whose URL has the smaller md5
        pair = {originals[i][0], reposts[i][0]}
        assert kept & pair == {min(pair, key=c4_rules.md5_hex)}


def test_the_variants_near_dedup_params_reach_the_stage(tmp_path, c4_texts):
    """At threshold 1.0 (set in the variant) a copy with one extra line is no near duplicate; the manifest says so."""
    originals, reposts = _reposted(c4_texts)
    config = RunConfig(output=str(tmp_path / "out"),
                       inputs=[write_jsonl(tmp_path / "pages.jsonl", originals + reposts)],
                       variant=load_variant("en", {"dedup": "none", "near_dedup": True,
                                                   "near_dedup_params": {"threshold": 1.0}}))
    result = run_c4(config)
    manifest = read_manifest(config.output)
    assert manifest.counters["near-dedup"]["passed"] == 15
    assert "filtered:near_duplicate" not in manifest.counters["near-dedup"]  # a counter never bumped is absent
    assert result.funnel.pages_out == 15 and result.funnel.reconciled
    assert manifest.config["variant"]["near_dedup_params"]["threshold"] == 1.0


def test_a_url_list_a_variant_file_names_that_does_not_exist_names_the_file(tmp_path, monkeypatch):
    """It was reported as '--webtext-urls urls.txt does not exist', an option the command line did not give."""
    custom = tmp_path / "mine.yaml"
    custom.write_text("name: mine\nwebtext_filter: true\nwebtext_urls: [urls.txt]\n")
    with pytest.raises(VariantError, match=r"variant '.*mine.yaml': webtext_urls file not found: urls.txt \(a "
                                           r"relative path is read from the working folder\)"):
        load_variant(str(custom))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "urls.txt").write_text("https://example.org/\n")
    assert load_variant(str(custom)).webtext_urls == ["urls.txt"]
    assert load_variant(str(custom), {"webtext_urls": ["given.txt"]}).webtext_urls == ["given.txt"]
