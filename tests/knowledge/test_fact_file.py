"""A fact set of one's own for bench_facts.py / facts_curve.py (bench/fact_sets.py load_records):
the JSON Lines a reviewer writes is read into the same records as the built-in sets, and a bad line
is an error that names it."""

import json

import pytest

from bench.fact_sets import load_records, natural_items, records


def _write(path, rows):
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def test_a_built_in_set_written_as_a_file_loads_as_the_same_records_and_nights(tmp_path):
    nights = {k: records("islands", k, 5) for k in (1, 2)}
    rows = [{"subject": r.subject, "text": r.text, "questions": {a: list(qa) for a, qa in r.questions.items()}, "night": k}
            for k, recs in nights.items() for r in recs]
    assert load_records(_write(tmp_path / "set.jsonl", rows), people=99) == nights
    unnumbered = [{k: v for k, v in row.items() if k != "night"} for row in rows]
    assert load_records(_write(tmp_path / "dealt.jsonl", unnumbered), people=5) == nights


def test_natural_questions_rank_among_the_attributes_other_answers_and_skip_a_record_without_it():
    a = records("bio", 1, 3)
    del a[2].questions["city"]
    items = natural_items(a, asked=lambda r: r is not a[1])
    city = [it for it in items if it.relation == "city"]
    assert [it.subject for it in city] == [a[0].subject]
    assert city[0].answer == a[0].questions["city"][1] and city[0].distractors == (a[1].questions["city"][1],)
    assert city[0].question == a[0].questions["city"][0] and city[0].kind == "natural"
    assert {it.subject for it in items} == {a[0].subject, a[2].subject}


@pytest.mark.parametrize("line, error", [
    ("not json", "not JSON"),
    ({"subject": "X", "text": "X is in Y."}, "needs \"subject\""),
    ({"subject": "X", "text": "X is in Y.", "questions": {"where": ["Where is X?", "Z"]}}, "'Z' of 'where' is not in the record's text"),
    ({"subject": "X", "text": "X is in Y.", "questions": {"where": "Y"}}, "must be [question, answer]"),
    ({"subject": "X", "text": "X is in Y.", "questions": {"where": ["Where is X?", "Y"]}, "night": 0}, "whole number from 1"),
])
def test_a_bad_line_is_an_error_naming_the_file_and_line(tmp_path, line, error):
    good = {"subject": "W", "text": "W is in V.", "questions": {"where": ["Where is W?", "V"]}}
    path = _write(tmp_path / "bad.jsonl", [good, line])
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: .*" + __import__("re").escape(error)):
        load_records(path, people=10)


def test_nights_are_whole_numbered_each_with_other_records_to_rank_against(tmp_path):
    rec = {"subject": "W", "text": "W is in V.", "questions": {"where": ["Where is W?", "V"]}}
    with pytest.raises(ValueError, match="without a gap"):
        load_records(_write(tmp_path / "gap.jsonl", [{**rec, "night": 1}, {**rec, "night": 1}, {**rec, "night": 3}, {**rec, "night": 3}]), 10)
    with pytest.raises(ValueError, match="either every record names"):
        load_records(_write(tmp_path / "mixed.jsonl", [{**rec, "night": 1}, rec]), 10)
    with pytest.raises(ValueError, match="night 2 has 1 record"):
        load_records(_write(tmp_path / "one.jsonl", [rec, rec, rec]), people=2)
    with pytest.raises(ValueError, match="no records"):
        load_records(_write(tmp_path / "empty.jsonl", [""]), 10)


def test_extraction_coverage_counts_an_answer_only_where_the_records_own_document_gives_it():
    from bench.fact_sets import Record, coverage_line, extraction_coverage
    from lib.knowledge.facts import extract_facts

    recs = [Record("Ada Lind", "Ada Lind was born in Quenholm in 1901. She works for the Harl Company.",
                   {"city": ("Where was Ada Lind born?", "Quenholm"), "employer": ("Who employs Ada Lind?", "Harl Company")}),
            Record("Ivo Brask", "Ivo Brask was born in Stavik in 1911. Everyone knows Ivo Brask's dog, Quenholm.",
                   {"city": ("Where was Ivo Brask born?", "Stavik"), "employer": ("Who employs Ivo Brask?", "Pell Works")}),
            Record("Ama Reed", "Ama Reed was born in Dorwick in 1923. She works for Pell Works.",
                   {"city": ("Where was Ama Reed born?", "Dorwick"), "employer": ("Who employs Ama Reed?", "Pell Works")})]
    ids = ["d0", "d1", "d2"]
    items = extract_facts([r.text for r in recs], ids)
    assert any(it.doc_id == "d2" and it.answer == "Pell Works" for it in items)
    cov, read, own = extraction_coverage(recs, items, dict(zip(ids, (r.text for r in recs))))
    # Ivo Brask's employer is in Ama Reed's document only: not read for him; "the Harl Company" is read as "Harl Company"
    assert cov == {"city": (3, 3, 3), "employer": (2, 2, 3)}
    assert read == own == {("Ada Lind", "city"), ("Ivo Brask", "city"), ("Ama Reed", "city"), ("Ada Lind", "employer"),
                           ("Ama Reed", "employer")}
    assert coverage_line(cov) == "read 5 of 6 facts (83%), 5 under the record's own name (83%): city 3/3, employer 2/3"
    # an answer read under another name than the record's: read, not under its own name
    club = [Record("Krirak Albion", "Hapis Beipai took charge of Krirak Albion in 2019. Hapis Beipai was born in Mirr.",
                   {"coach_born": ("Where was Krirak Albion's coach born?", "Mirr")}),
            Record("Vask Rovers", "Vask Rovers play in Pell. Ada Lind coaches them.", {"coach_born": ("?", "Pell")})]
    items = extract_facts([r.text for r in club], ["c0", "c1"])
    cov, read, own = extraction_coverage(club, items, {"c0": club[0].text, "c1": club[1].text})
    assert ("Krirak Albion", "coach_born") in read - own and ("Vask Rovers", "coach_born") in own


def test_the_shipped_fact_files_load_as_four_nights_and_extraction_reads_most_of_a_blind_one():
    from pathlib import Path

    from bench.fact_sets import extraction_coverage
    from lib.knowledge.facts import extract_facts

    files = sorted((Path(__file__).resolve().parents[2] / "bench" / "fact_files").glob("*.jsonl"))
    assert len(files) == 29
    one_night = {"observatories", "wineries", "trips", "studies", "flats", "acquisitions", "albums", "boardgames", "museums", "expeditions",
                 "societies", "cultivars", "bakeries", "minerals"}
    for f in files:
        nights = load_records(f, 24)
        assert sorted(nights) == ([1] if f.stem in one_night else [1, 2, 3, 4]) and all(len(r) == 24 for r in nights.values()), f.name
    recs = load_records(files[0].with_name("clubs.jsonl"), 24)[1]
    ids = [f"d{i}" for i in range(len(recs))]
    cov, _, _ = extraction_coverage(recs, extract_facts([r.text for r in recs], ids), dict(zip(ids, (r.text for r in recs))))
    # written blind: 34% read before the clozes and the sentence-opener rules, 72% with them, 77% with clauses and labels
    assert sum(r for r, _, _ in cov.values()) >= 0.6 * sum(a for _, _, a in cov.values())
    # written blind and read by no one before it was measured: 59% of its facts under the record's own name
    # (43% before the rules on what a document is about, 2026-11-27)
    recs = load_records(files[0].with_name("observatories.jsonl"), 24)[1]
    ids = [f"d{i}" for i in range(len(recs))]
    cov, _, _ = extraction_coverage(recs, extract_facts([r.text for r in recs], ids), dict(zip(ids, (r.text for r in recs))))
    assert sum(o for _, o, _ in cov.values()) >= 0.5 * sum(a for _, _, a in cov.values())
    # written blind after the rules on a document's topic and the facts told of its thing (2026-11-28): under the
    # record's own name 37 -> 52% (museums) and 28 -> 42% (expeditions) with those rules; then mended on their failures
    # (what a thing is known for, counts in words): 59% and 47%. `societies` and `cultivars`, written blind after that
    # and read by no one: 46 -> 48% and 35 -> 37% with the mending (41% with colours); `bakeries` and `minerals`, written blind after that and
    # read by no one, 38% and 0% on the morning's code (a mineral's lower-case name was no subject), 39% and 32% with coined names
    for name, share in (("museums", 0.55), ("expeditions", 0.42), ("societies", 0.44), ("cultivars", 0.37), ("bakeries", 0.35),
                        ("minerals", 0.28)):
        recs = load_records(files[0].with_name(f"{name}.jsonl"), 24)[1]
        ids = [f"d{i}" for i in range(len(recs))]
        cov, _, _ = extraction_coverage(recs, extract_facts([r.text for r in recs], ids), dict(zip(ids, (r.text for r in recs))))
        assert sum(o for _, o, _ in cov.values()) >= share * sum(a for _, _, a in cov.values()), name


def test_an_items_answer_gives_the_asked_one_with_its_unit_or_currency_aside():
    from bench.fact_sets import _same_answer
    assert _same_answer("The Kell", "kell") and _same_answer("7,420", "7,420 metres") and _same_answer("£500", "500")
    assert not _same_answer("£500", "5000") and not _same_answer("500", "£500 a month") and not _same_answer("Kell", "Pell")


def test_the_bench_reads_several_seeds_as_a_mean_and_a_range(capsys):
    from bench.bench_facts import spread

    def night(k, facts, natural):
        return {"night": k, "facts_after": facts, "natural_after": natural}

    results = {"inject/s0": {"nights": [night(1, 0.70, 0.20), night(2, 0.9, 0.5)]},
               "inject/s1": {"nights": [night(1, 0.80, 0.30), night(2, 0.9, 0.5)]},
               "inject/s2": {"nights": [night(1, 0.75, 0.16), night(2, 0.9, 0.5)]},
               "plain": {"nights": [night(1, 0.10, 0.05)]}}
    out = spread(results)
    assert set(out) == {"inject/1", "inject/2"}   # one run of plain: nothing to spread
    assert out["inject/1"]["facts_after"] == pytest.approx((0.75, 0.70, 0.80))
    assert out["inject/1"]["natural_after"] == pytest.approx((0.22, 0.16, 0.30))
    assert "inject   night 1, 3 seeds: facts mean 75.0% (range 70.0%-80.0%), natural mean 22.0% (range 16.0%-30.0%)" \
        in capsys.readouterr().out


def test_the_bench_gives_a_nights_records_the_same_ids_in_every_run(tmp_path):
    # the pipeline holds documents out by their ids' hash: with the buffer's random ids two runs of one fact file
    # (two codes) held out different records and asked their natural questions of different others
    import uuid

    import lib.buffer.store as store
    from bench.bench_facts import add_night
    from lib.buffer.store import Buffer
    from lib.data.token_cache import is_heldout

    texts = [f"Kell Works number {i} was founded in {1900 + i} by Ada Lind." for i in range(24)]
    runs = []
    for k in range(2):
        buf = Buffer(tmp_path / f"run{k}")
        runs.append(add_night(buf, texts, 1, "bench:test:1"))
        buf.close(flush=True)
    assert runs[0] == runs[1] and len(set(runs[0])) == 24 and all(uuid.UUID(i).version == 7 for i in runs[0])
    assert [is_heldout(i, 0.2) for i in runs[0]] == [is_heldout(i, 0.2) for i in runs[1]] and any(is_heldout(i, 0.2) for i in runs[0])
    buf = Buffer(tmp_path / "run2")
    assert add_night(buf, texts, 2, "bench:test:2") != runs[0]                            # another night, other ids
    buf.close(flush=True)
    assert store.new_record_id.__module__ == "lib.buffer.records"                          # the buffer's own id maker put back
