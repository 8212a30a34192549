"""Fact extraction and knowledge injection on real documents: what is found, what must not be."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.fact_sets import records
from lib.config import KnowledgeConfig, SamplingConfig, SourceConfig
from lib.knowledge.augment import augment_documents, explicit_names
from lib.knowledge.facts import extract_facts, read_facts
from lib.knowledge.forms import QUESTION_FORMS, inverted_question, split_forms
from lib.knowledge.inject import KNOWLEDGE_SOURCE, facts_file, inject_knowledge, knowledge_sources, night_plan, trained_documents


def _facts(texts):
    return extract_facts(texts, [f"d{i}" for i in range(len(texts))])


def _triples(items):
    return {(i.subject, i.relation, i.answer) for i in items}


@pytest.mark.parametrize("fact_set", ["bio", "other"])
def test_every_attribute_of_two_different_fact_sets_is_found(fact_set):
    """Two fact sets with no template in common: each record's attribute values are found as
    answers about that record's subject (except values stated before the subject is named)."""
    recs = records(fact_set, 1, 12)
    items = _facts([r.text for r in recs])
    by_subject: dict[str, set[str]] = {}
    for it in items:
        by_subject.setdefault(it.subject, set()).add(it.answer)
    found = total = 0
    for r in recs:
        for attr, (_, value) in r.questions.items():
            if attr == "field":  # a lower-case common noun ("geology") is not a salient span
                continue
            total += 1
            found += value in by_subject.get(r.subject, set())
    assert found / total >= 0.6, f"{found}/{total} attribute values found"
    for it in items:
        assert it.answer not in it.subject and it.subject not in it.answer
        assert it.question.rstrip().endswith((":", "?", "A:")) or it.question.endswith(it.relation)
        assert it.answer not in it.question.split(it.subject)[0]
        assert it.answer not in it.distractors and len(set(it.distractors)) == len(it.distractors)
        assert it.distractors, "every item is multiple choice"


def test_pronouns_resolve_to_the_named_entity_and_kinds_are_typed():
    text = ("Ilsa Marrowin was born in Quellport in 1948. She studied astronomy at Dunmere College. "
            "Her first telescope cost 340 crowns. In 1975 she moved to Harth. It rained that year.")
    other = "Tobin Askew was born in Varnley in 1961. He worked for Oskar Fenn & Daughters until 1990. His boat cost 95 crowns."
    items = _facts([text, other])
    t = _triples(items)
    assert ("Ilsa Marrowin", "was born in", "Quellport") in t
    assert ("Ilsa Marrowin", "was born in Quellport in", "1948") in t
    assert ("Ilsa Marrowin", "studied astronomy at", "Dunmere College") in t
    assert ("Ilsa Marrowin", "'s first telescope cost", "340") in t
    assert ("Tobin Askew", "worked for", "Oskar Fenn & Daughters") in t
    kinds = {i.answer: i.kind for i in items}
    assert kinds["1948"] == "year" and kinds["340"] == "number" and kinds["Quellport"] == "proper"
    # never: the subject as its answer, a sentence-initial ordinary word, "It" as an entity
    answers = {i.answer for i in items}
    assert not answers & {"Ilsa Marrowin", "Ilsa", "Marrowin", "She", "Her", "In", "It", "Tobin Askew"}
    # distractors of the same kind: a year is never offered a city
    for it in items:
        assert all(d.isdigit() == it.answer.isdigit() for d in it.distractors), it


def test_a_relation_is_its_own_clause_not_the_clauses_chained_before_it():
    text = ("Pell Dorrance studied botany and later worked for Amsel Brothers. "
            "The Orla Wind was built by Kettle & Maw Yards and launched in 1931.")
    ruth = "Ruth Varga grew up in Elmsby, where she was born in 1966. She sold the mill and ten boats to Ivo Sarn."
    t = _triples(_facts([text, ruth, "Joss Ebbing worked for Brill Tanneries in Harrow until 1950."]))
    assert ("Pell Dorrance", "later worked for", "Amsel Brothers") in t
    assert ("Orla Wind", "was launched in", "1931") in t          # the auxiliary carried over
    assert ("Ruth Varga", "was born in", "1966") in t
    assert ("Ruth Varga", "grew up in", "Elmsby") in t
    # "and" followed by a noun phrase is not a new clause: the relation stays whole
    assert ("Ruth Varga", "sold the mill and ten boats to", "Ivo Sarn") in t
    # an earlier answer inside the relation is not part of it, with its preposition
    assert ("Joss Ebbing", "worked in", "Harrow") in t and ("Joss Ebbing", "worked until", "1950") in t


def test_a_relation_never_carries_another_answer_and_a_who_clause_is_a_fact_of_its_own():
    ship = ("The Vela Star is a cargo ship whose home port is Port Amsel. Its captain is Ona Brisk, who commands "
            "a crew of 40 sailors.")
    fronted = "Launched in 1931 from the yard of Kettle & Maw Yards, the Orla Wind sails out of Port Dune."
    bio = "Vera Lind was born in Oslo in 1934. She later worked for Amsel Brothers."
    other = "The Ona Gale was launched in 1950 and carries a crew of 12."  # "launched" in lower case; another number
    t = _triples(_facts([ship, fronted, bio, other]))
    assert ("Vela Star", "'s home port is", "Port Amsel") in t          # whose: the subject's own
    assert ("Vela Star", "'s captain is", "Ona Brisk") in t
    assert ("Ona Brisk", "commands a crew of", "40") in t                # who: a fact of the captain's
    assert not any(r.endswith("who commands a crew of") for _, r, _ in t)
    assert ("Orla Wind", "was launched from the yard of", "Kettle & Maw Yards") in t
    assert ("Orla Wind", "was launched in", "1931") in t
    # kept where removing it would give the city's own relation to the year as well
    assert ("Vera Lind", "was born in", "Oslo") in t and ("Vera Lind", "was born in Oslo in", "1934") in t


def test_facts_of_other_sentence_shapes_keep_their_own_subject_and_clause():
    """English constructions the two bench sets do not use, on any kind of entity."""
    docs = [
        # an appositive and a non-restrictive relative clause after the subject
        "Harrow Looms, a weaver of silk scarves based in Quenby, was started by Ilse Marrow in 1902.",
        "Pellwick, which lies on the Arn, has 4,200 residents. The parish was enclosed in 1790, and its vicar is Amos Tarr.",
        # fronted adverb + participle, a fronted "Written by ... and ..." and a title with "The"
        "First sighted in 1811, Varro Rock was charted by Edda Voss. The rock is grey, has a height of 90 metres, and lies off Kell Point.",
        "Painted by Oren Sail and sold by Dunmore Rooms in 1911, The Grey Orchard hangs in Lisk.",
        # a date with its month, "N of X" for a known X, a possessive role in apposition, "The N is X"
        "Corla Tide was first seen on 9 June 1877 by Bram Oster. Traces of Corla Tide are kept in Ostmark.",
        "The Lantern Choir is a choir from Heddon. Their conductor, Ysolde Brin, joined the choir on 3 April 1999. The pianist is Jory Kell.",
        # "The N of X" introducing X; "its" after a newly named subject is the entity before
        "The hamlet of Wrenby lies near the Tave. Odo Pratt has been its warden since 1961.",
        # a description subject followed by a parenthesis
        "Ferro Bell is a bell in Ulme. The bell, which hangs in Saint Ama, was cast by Tomas Reed.",
    ]
    items = _facts(docs)
    t = _triples(items)
    assert ("Harrow Looms", "is a weaver of silk scarves based in", "Quenby") in t
    assert ("Harrow Looms", "was started by", "Ilse Marrow") in t and ("Harrow Looms", "was started in", "1902") in t
    assert ("Pellwick", "lies on the", "Arn") in t and ("Pellwick", "has", "4,200") in t
    assert ("Pellwick", "'s vicar is", "Amos Tarr") in t                      # ", and its vicar is"
    assert ("Varro Rock", "was first sighted in", "1811") in t and ("Varro Rock", "was charted by", "Edda Voss") in t
    assert ("Varro Rock", "has a height of", "90") in t and ("Varro Rock", "lies off", "Kell Point") in t
    assert ("Grey Orchard", "was painted by", "Oren Sail") in t and ("Grey Orchard", "was sold by", "Dunmore Rooms") in t
    assert ("Grey Orchard", "hangs in", "Lisk") in t
    assert ("Corla Tide", "was first seen on", "9 June 1877") in t and ("Corla Tide", "'s traces are kept in", "Ostmark") in t
    assert ("Lantern Choir", "'s conductor is", "Ysolde Brin") in t and ("Ysolde Brin", "joined the choir on", "3 April 1999") in t
    assert ("Lantern Choir", "'s pianist is", "Jory Kell") in t
    assert ("Ferro Bell", "hangs in", "Saint Ama") in t and ("Ferro Bell", "was cast by", "Tomas Reed") in t
    assert ("Wrenby", "lies near the", "Tave") in t and ("Odo Pratt", "has been Wrenby's warden since", "1961") in t
    # never: a fronting word or a month as a name, a parenthesis or another clause inside a relation
    assert not {s for s, _, _ in t} & {"First", "Painted", "Traces of Corla Tide"}
    assert not {"June", "April"} & {a for _, _, a in t}
    assert not any(", " in r for _, r, _ in t), sorted(r for _, r, _ in t if ", " in r)


def test_a_name_sharing_a_word_with_the_subject_is_still_an_answer():
    docs = ["Orvel Mill was bought by Tansy Mill in 1911. It stands in Hask.",
            "Dara Quent Ltd sold Quent Works in 1950 to Ilm Dara. Mill Orvel bought Orvel Mill in 1960."]
    t = _triples(_facts(docs))
    assert ("Orvel Mill", "was bought by", "Tansy Mill") in t
    assert ("Dara Quent Ltd", "sold", "Quent Works") in t and ("Dara Quent Ltd", "sold Quent Works to", "Ilm Dara") in t
    # still never the subject's name, a part of it, or its words in another order
    assert not {a for s, _, a in t if s == "Mill Orvel"} & {"Orvel Mill", "Orvel", "Mill"}


def test_a_definite_description_refers_to_the_entity_that_fits_it():
    """"The <noun>" is the latest entity typed with that noun, else the name a verb just took as
    its object, else (after a person) the latest name; a person's role noun and "The ship" after
    a role-filler stay with the last subject."""
    docs = [
        "Ilsa Varn wrote The Copper Orchard in 1932. The novel, which is set in Drevmoor, was published by Halden Press.",
        "Tomas Reil is a painter from Gorsk. He bought Vell Manor in 1931. The house stands on the Irra. The painter died in Lusk.",
        "The Orla Mill is a tannery on the Sask. Its owner, Pim Dorr, sold Hesk Farm in 1921. The tannery employs 40 people.",
        "Mirta Holm wrote Gale Street in 1950. The author was born in Ennsk.",
        "Asta Brin was born in Korsk in 1901. The town lies on the Vell. She later moved to Pell.",
        "The Wend Star was launched in 1950. Its builder was Ask Yards. The ship sails from Port Olm with 12 sailors.",
    ]
    t = _triples(_facts(docs))
    assert ("Copper Orchard", "is set in", "Drevmoor") in t and ("Copper Orchard", "was published by", "Halden Press") in t
    assert ("Ilsa Varn", "wrote", "The Copper Orchard") in t
    assert ("Vell Manor", "stands on the", "Irra") in t and ("Tomas Reil", "died in", "Lusk") in t
    assert ("Orla Mill", "employs", "40") in t and ("Pim Dorr", "sold", "Hesk Farm") in t
    assert ("Mirta Holm", "was born in", "Ennsk") in t
    assert ("Korsk", "lies on the", "Vell") in t and ("Asta Brin", "later moved to", "Pell") in t
    assert ("Wend Star", "sails from", "Port Olm") in t and ("Wend Star", "sails with", "12") in t
    assert not {a for s, _, a in t if s in ("Ilsa Varn", "Hesk Farm", "Ask Yards", "Gale Street")} & {
        "Drevmoor", "Halden Press", "40", "Port Olm", "Ennsk"}


def test_a_title_with_lower_case_words_is_one_answer_where_quotes_or_commas_close_it():
    docs = [
        "The Marl Quartet is a string quartet from Devik. Their third record, Songs for the Harbour, was released in 1988.",
        'Edda Sorn painted "Girl at the Window" in 1911. She said "We sold it" to Ivo Brask.',
        # not closed: a title and a place the words cannot tell apart, and a list
        "Ivo Brask wrote the novel Ulysses in Paris in 1920. He moved to Tovel in 1921.",
        "Oda Lenk lived in two cities, Oslo and Bergen. Her brother, Aron Lenk of Vask, was born in 1950.",
    ]
    t = _triples(_facts(docs))
    assert ("Marl Quartet", "'s third record is", "Songs for the Harbour") in t
    assert ("Songs for the Harbour", "was released in", "1988") in t
    assert ("Edda Sorn", "painted", "Girl at the Window") in t                 # no quote left in the relation
    assert ("Ivo Brask", "wrote the novel", "Ulysses") in t and ("Ivo Brask", "wrote the novel Ulysses in", "Paris") in t
    assert ("Ivo Brask", "moved to", "Tovel") in t
    answers = {a for _, _, a in t}
    assert {"Bergen", "Aron Lenk of Vask"} <= answers
    assert not answers & {"Ulysses in Paris", "Oslo and Bergen", "Tovel in", "We", "Songs", "Harbour", "Girl", "Window"}


def test_subordinate_clauses_listed_verbs_and_a_fronted_own_phrase_give_their_facts():
    docs = [
        # a subordinate clause whose pronoun is the subject; an article goes with the answer it precedes
        "The Ostra Canal leaves the Harl Basin and runs for 40 miles until it joins the Vell Estuary.",
        # verb phrases listed with commas and a final "and"
        "The Brisk Line starts at Tamber Halt, passes the Kellin Viaduct, and terminates at Ruelford.",
        # a fronted phrase about the subject's own thing
        "From her workshop in Lessow, Ada Crane built organs for forty years.",
        "Noor Veld grew up in Carrick, where she was born in 1941.",
        "Ivo Pell grew up in Dunmore, where he was born in 1950.",  # a year of another kind to rank 1941 against
    ]
    t = _triples(_facts(docs))
    assert ("Ostra Canal", "joins the", "Vell Estuary") in t
    assert ("Ostra Canal", "leaves the", "Harl Basin") in t
    assert ("Brisk Line", "terminates at", "Ruelford") in t and ("Brisk Line", "passes the", "Kellin Viaduct") in t
    assert ("Brisk Line", "starts at", "Tamber Halt") in t
    assert ("Ada Crane", "'s workshop is in", "Lessow") in t
    assert ("Noor Veld", "was born in", "1941") in t                      # the he/she clause as before
    assert not any("Harl Basin" in r or "Kellin Viaduct" in r for _, r, _ in t)  # no relation carries another answer


def test_distractors_follow_the_words_before_the_answer_before_the_kind():
    docs = ["Abel Thorn lives in Carrow. He works for Dunlin Mills.",
            "Bea Skerry lives in Moravel. She works for Otter Freight.",
            "Cas Wynne lives in Pollby. He works for Heron Glass."]
    for it in _facts(docs):
        if it.relation == "lives in":                    # the places first, then the employers
            assert set(it.distractors[:2]) <= {"Carrow", "Moravel", "Pollby"}, it


def test_dates_are_one_answer():
    items = _facts(["Vera Lind signed the treaty on 4 March 1921. She died on July 9, 1960.",
                    "Omar Vell signed the charter on 12 May 1930. He retired in 1961."])
    kinds = {i.answer: i.kind for i in items}
    assert kinds.get("4 March 1921") == "date" and kinds.get("July 9, 1960") == "date"
    assert "1921" not in kinds  # the year inside a date is not a second answer


def test_code_and_boilerplate_give_no_facts():
    import rich

    stdlib = Path(sysconfig.get_paths()["stdlib"])
    code = [(stdlib / name).read_text(encoding="utf-8")[:4000] for name in ("textwrap.py", "bisect.py", "colorsys.py")]
    # real source files whose docstrings read like prose ("Defaults to None.")
    rich_dir = Path(rich.__file__).parent
    code += [p.read_text(encoding="utf-8")[:3000] for p in sorted(rich_dir.glob("*.py")) if p.stat().st_size > 1500][:16]
    items = _facts(code)
    assert items == [], [(i.subject, i.relation, i.answer) for i in items]
    # a line every document carries (a signature) is not a fact of any of them
    docs = [f"{r.text}\nPosted by Admin Team in Newsroom." for r in records("bio", 2, 6)]
    answers = {i.answer for i in _facts(docs)}
    assert "Admin Team" not in answers and "Newsroom" not in answers


def test_real_package_description_gives_facts_not_code():
    """A real README (a package's METADATA on this machine): prose facts may be found, the code
    examples in it give none."""
    import importlib.metadata as md

    text = md.metadata("pyarrow").get_payload() or md.metadata("pyarrow")["Description"] or ""
    items = _facts([text, "Ada Brill founded Kestrel Data in 2011. She sold it in 2019."])
    for it in items:
        assert not any(ch in it.answer for ch in "{}[]();=<>"), it
        assert not any(ch in it.relation for ch in "{}[];=<>"), it


def test_question_forms_hold_out_per_fact():
    trained, held = split_forms("abc", QUESTION_FORMS, 0.34)
    assert held and set(trained).isdisjoint(held)
    assert all(QUESTION_FORMS[i].probe for i in held)
    assert [f.name for f in QUESTION_FORMS if not f.probe], "cloze forms are only ever trained"


def test_augmentation_never_trains_the_heldout_question():
    recs = records("bio", 3, 8)
    texts = [r.text for r in recs]
    ids = [f"d{i}" for i in range(len(texts))]
    items = extract_facts(texts, ids)
    forms = augment_documents(ids, texts, items, forms_per_document=8)
    assert {f.form for f in forms} == {"qa", "permuted", "explicit"}
    corpus = "\n".join(f.text for f in forms) + "\n".join(texts)
    for it in items:
        assert it.question.rstrip() not in corpus, f"held-out question trained: {it.question!r}"
        assert it.answer in corpus
    # the entity named in full: no sentence of an explicit form starts with a pronoun
    for f in forms:
        if f.form in ("explicit", "permuted"):
            assert not any(s.split()[0] in ("He", "She", "His", "Her") for s in f.text.split(". ") if s)
    assert explicit_names("Ana Cole sings. She wins. Her cat sleeps.", "Ana Cole") == [
        "Ana Cole sings.", "Ana Cole wins.", "Ana Cole's cat sleeps."]


def test_inject_knowledge_cuts_heldout_before_augmenting(tmp_path):
    recs = records("other", 4, 20)
    ids = [f"doc{i:02d}" for i in range(len(recs))]
    run = tmp_path / "run"
    (run / "curated").mkdir(parents=True)
    pq.write_table(pa.table({"id": ids, "text": [r.text for r in recs]}), run / "curated" / "docs-0.parquet")
    sampling = SamplingConfig(heldout_fraction=0.1, heldout_min_docs=4)
    stats = inject_knowledge(run, KnowledgeConfig(), sampling)
    kept, _, heldout = trained_documents(ids, [r.text for r in recs], sampling)
    assert heldout == 4 and stats["heldout_documents"] == 4
    held = set(ids) - set(kept)
    facts = read_facts(facts_file(run))
    assert facts and stats["facts"] == len(facts)
    assert not {f.doc_id for f in facts} & held
    forms = pq.read_table(run / "knowledge" / "augmented" / "forms.parquet").to_pylist()
    assert forms and not {f["augments"] for f in forms} & held
    assert {f["form"] for f in forms} <= {"qa", "permuted", "explicit"}
    held_texts = [recs[ids.index(h)].text for h in held]
    assert not any(h.split(".")[0] in f["text"] for h in held_texts for f in forms)
    # the mix: the forms as their own source, taken from the corpus's share
    base = [SourceConfig(name="stdlib", path=tmp_path, weight=0.75, kind="corpus"),
            SourceConfig(name="new", path=run / "curated", weight=0.25, kind="buffer")]
    mixed = knowledge_sources(base, run, KnowledgeConfig(ratio=0.25))
    assert [(s.name, s.kind, round(s.weight, 3)) for s in mixed] == [
        ("stdlib", "corpus", 0.5), ("new", "buffer", 0.25), (KNOWLEDGE_SOURCE, "curated", 0.25)]
    assert knowledge_sources(base, run, KnowledgeConfig(enabled=False)) == base
    with pytest.raises(ValueError, match="knowledge.ratio"):
        knowledge_sources(base, run, KnowledgeConfig(ratio=0.8))


def test_a_later_night_rehearses_the_memorys_facts_in_trained_forms_only(tmp_path):
    """Night 1's documents and facts in the memory: night 2 re-derives their question forms
    (never a held-out one) as its own `rehearsal` source, beside tonight's forms."""
    sampling = SamplingConfig(heldout_fraction=0.1, heldout_min_docs=2)
    old = records("bio", 11, 10)
    old_ids = [f"old{i}" for i in range(len(old))]
    night1 = tmp_path / "night1"
    (night1 / "curated").mkdir(parents=True)
    pq.write_table(pa.table({"id": old_ids, "text": [r.text for r in old]}), night1 / "curated" / "docs-0.parquet")
    inject_knowledge(night1, KnowledgeConfig(), sampling)
    memory = tmp_path / "memory"
    (memory / "v1" / "train").mkdir(parents=True)
    (memory / "v1" / "train" / "docs-0.parquet").write_bytes((night1 / "curated" / "docs-0.parquet").read_bytes())
    (memory / "v1" / "facts.jsonl").write_bytes(facts_file(night1).read_bytes())
    (memory / "v1" / "night.json").write_text('{"version": "v1"}')
    old_facts = read_facts(facts_file(night1))

    new = records("bio", 12, 10)
    run = tmp_path / "night2"
    (run / "curated").mkdir(parents=True)
    pq.write_table(pa.table({"id": [f"new{i}" for i in range(10)], "text": [r.text for r in new]}), run / "curated" / "docs-0.parquet")
    stats = inject_knowledge(run, KnowledgeConfig(rehearsal_forms=2), sampling, memory=memory)
    rehearsal = pq.read_table(run / "knowledge" / "rehearsal" / "forms.parquet").to_pylist()
    assert stats["rehearsal"] == len(rehearsal) and stats["rehearsal_documents"] == len({f.doc_id for f in old_facts})
    assert {r["form"] for r in rehearsal} == {"qa"} and {r["augments"] for r in rehearsal} <= set(old_ids)
    text = "\n".join(r["text"] for r in rehearsal)
    for f in old_facts:
        assert f"{f.answer}" in text
        assert f.question.rstrip() not in text, f"held-out question rehearsed: {f.question!r}"
    assert len([r for r in rehearsal if r["augments"] == old_facts[0].doc_id]) == 2
    base = [SourceConfig(name="stdlib", path=tmp_path, weight=0.75, kind="corpus"),
            SourceConfig(name="new", path=run / "curated", weight=0.25, kind="buffer")]
    mixed = knowledge_sources(base, run, KnowledgeConfig(), 0.2, 0.1)
    assert [(s.name, round(s.weight, 3)) for s in mixed] == [
        ("stdlib", 0.45), ("new", 0.25), (KNOWLEDGE_SOURCE, 0.2), ("rehearsal", 0.1)]
    # off: nothing rehearsed
    stats = inject_knowledge(run, KnowledgeConfig(rehearsal_exposures=0), sampling, memory=memory)
    assert stats["rehearsal"] == 0 and not list((run / "knowledge" / "rehearsal").glob("*.parquet"))


def test_endpoint_writer_keeps_only_paraphrases_that_repeat_every_answer(monkeypatch):
    """A real local OpenAI-style server: the key comes from the named environment variable, and
    a paraphrase that changes an answer is dropped."""
    import json as _json
    import threading
    from http.server import BaseHTTPRequestHandler, HTTPServer

    from lib.knowledge.writer import written_forms

    seen = {}

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = _json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen["auth"], seen["n"], seen["path"] = self.headers.get("Authorization"), body["n"], self.path
            reply = {"choices": [{"message": {"content": "In 1948 Quellport saw the birth of Ilsa Marrowin."}},
                                 {"message": {"content": "Ilsa Marrowin was born in Harth in 1948."}}]}
            data = _json.dumps(reply).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *a):
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("WRITER_KEY", "sekrit")
        cfg = KnowledgeConfig(writer="endpoint", writer_url=f"http://127.0.0.1:{server.server_port}/v1", writer_model="m",
                              writer_api_key_env="WRITER_KEY", writer_paraphrases=2)
        kept, dropped = written_forms(["d0"], ["Ilsa Marrowin was born in Quellport in 1948."], [["Quellport", "1948"]], cfg)
    finally:
        server.shutdown()
    assert seen == {"auth": "Bearer sekrit", "n": 2, "path": "/v1/chat/completions"}
    assert [k.text for k in kept] == ["In 1948 Quellport saw the birth of Ilsa Marrowin."] and dropped == 1
    assert kept[0].form == "writer" and kept[0].augments == "d0"
    monkeypatch.delenv("WRITER_KEY")
    with pytest.raises(ValueError, match="WRITER_KEY"):
        written_forms(["d0"], ["x"], [["x"]], cfg)


def test_champion_writer_generates_on_a_real_model(tmp_path):
    from lib.knowledge.writer import champion_paraphrases
    from tests.hf_models import build_tiny_model

    folder = build_tiny_model("llama", tmp_path / "m")
    outs = champion_paraphrases(folder, ["Ilsa Marrowin was born in Quellport.", "The Lenei Star sails out of Port Figri."], 2)
    assert len(outs) == 2 and all(len(o) == 2 and all(isinstance(t, str) for t in o) for o in outs)


def test_augmented_forms_are_their_own_manifest_source_and_never_held_out(tmp_path):
    """Through the real data step: the manifest names the forms' source, the held-out file holds
    exactly the original documents the knowledge stage cut, and no form is held out."""
    from data_fixtures import train_tokenizer, write_sources
    from lib.data.sampling import NEW_SOURCE, prepare_training_data

    tok = train_tokenizer(tmp_path / "tok", 512)
    corpus, _ = write_sources(tmp_path)
    recs = records("bio", 5, 24)
    ids = [f"bio{i:02d}" for i in range(len(recs))]
    run = tmp_path / "run"
    (run / "curated").mkdir(parents=True)
    pq.write_table(pa.table({"id": ids, "text": [r.text for r in recs]}), run / "curated" / "docs-0.parquet")
    sampling = SamplingConfig(heldout_fraction=0.1, heldout_min_docs=4, fim_rate_code=0.0)
    inject_knowledge(run, KnowledgeConfig(), sampling)
    sources = knowledge_sources([SourceConfig(name="stdlib", path=corpus, weight=0.5, kind="corpus"),
                                 SourceConfig(name=NEW_SOURCE, path=run / "curated", weight=0.25, kind="buffer")],
                                run, KnowledgeConfig(ratio=0.25))
    data = prepare_training_data(sources, tok, run / "prepared", token_budget=60_000, sampling=sampling, seq_len=128, workers=1)
    rows = pq.read_table(run / "prepared" / "manifest.parquet").to_pylist()
    forms = pq.read_table(run / "knowledge" / "augmented" / "forms.parquet").to_pylist()
    assert {r["doc_id"] for r in rows if r["source"] == KNOWLEDGE_SOURCE} <= {f["id"] for f in forms}
    assert data["sources"][KNOWLEDGE_SOURCE]["heldout_docs"] == 0
    assert data["tokens_per_source"][KNOWLEDGE_SOURCE] > 0
    held = set(pq.read_table(run / "prepared" / "heldout" / f"{NEW_SOURCE}.parquet").column("id").to_pylist())
    kept, _, _ = trained_documents(ids, [r.text for r in recs], sampling)
    assert held == set(ids) - set(kept) and len(held) == 4
    assert not (run / "prepared" / "heldout" / f"{KNOWLEDGE_SOURCE}.parquet").exists()
    assert not {f["augments"] for f in forms} & held


def test_a_night_gives_its_forms_the_share_they_need_and_is_lengthened_when_the_largest_is_not_enough():
    k = KnowledgeConfig(ratio=0.25, min_exposures=6, max_steps_factor=3, rehearsal_exposures=2)
    # 200 × 2048 = 409,600 tokens; 10,000 tokens × 6 exposures need a share of 0.146: no more
    steps, share, old, note = night_plan(200, 2048, k, 10_000, corpus=0.9)
    assert steps == 200 and note is None and share == pytest.approx(60_000 / 409_600) and old == 0
    steps, share, old, note = night_plan(200, 2048, k, 100_000, corpus=0.9)  # needs 1,172 steps at 0.25, capped at 600
    assert (steps, share) == (600, 0.25) and "capped by knowledge.max_steps_factor" in note and "100,000 tokens" in note
    steps, share, old, note = night_plan(200, 2048, k, 40_000, corpus=0.9)
    assert steps == 469 and "469 steps instead of 200" in note
    # the corpus replay keeps at least half its share: 0.3 of corpus allows 0.15, so the night is longer
    steps, share, old, note = night_plan(200, 2048, k, 40_000, corpus=0.3)
    assert share == 0.15 and steps == 600 and "capped at half the corpus replay's share" in note
    assert night_plan(200, 2048, KnowledgeConfig(min_exposures=0, ratio=0.25), 10**9) == (200, 0.25, 0.0, None)
    assert night_plan(200, 2048, KnowledgeConfig(enabled=False), 10**5) == (200, 0.0, 0.0, None)
    # rehearsal: 20,000 tokens × 2 exposures beside tonight's 10,000 × 6 fit in 200 steps at 0.25
    steps, share, old, note = night_plan(200, 2048, k, 10_000, corpus=0.9, rehearsal_tokens=20_000)
    assert steps == 200 and old == pytest.approx(40_000 / 409_600) and share == pytest.approx(60_000 / 409_600)
    # a large memory never takes more than tonight's own forms: at most half the knowledge share
    steps, share, old, note = night_plan(200, 2048, k, 10_000, corpus=0.9, rehearsal_tokens=10**6)
    assert old <= share and old == pytest.approx(share, rel=0.01) and share + old <= 0.25 + 1e-9 and "rehearsal forms" in note
    # past the cap the memory keeps its exposures and tonight's forms get the rest: 100,000 × 6 and
    # 50,000 × 2 need 1,368 steps, capped at 600 (307,200 tokens of forms); scaled down together the
    # rehearsal would get 0.9 of its 2
    steps, share, old, note = night_plan(200, 2048, k, 100_000, corpus=0.9, rehearsal_tokens=50_000)
    assert steps == 600 and old * 600 * 2048 / 50_000 == pytest.approx(2.0) and share + old == pytest.approx(0.25)
    assert "~2.1 exposures, the rehearsal ~2.0" in note
    # never more than half the share, however large the memory
    steps, share, old, note = night_plan(200, 2048, k, 100_000, corpus=0.9, rehearsal_tokens=90_000)
    assert old == pytest.approx(0.125) and share == pytest.approx(0.125)


def test_questions_are_inverted_the_way_people_ask_for_any_relation_of_that_shape():
    assert inverted_question("Mara Quillon", "was born in", "year", strand=False) == "In what year was Mara Quillon born?"
    assert inverted_question("Mara Quillon", "later worked for", "proper", strand=True) == "What did Mara Quillon later work for?"
    assert inverted_question("The Vela", "was built by", "name", strand=True) == "Who was The Vela built by?"
    assert inverted_question("The Vela", "carries a crew of", "number", strand=False) == "Of what number does The Vela carry a crew?"
    assert inverted_question("Ann Oru", "studied", "proper", strand=False) == "What did Ann Oru study?"
    assert inverted_question("Ann Oru", "retired in", "year", strand=False) == "In what year did Ann Oru retire?"
    # a possessive role: "the N of X" or "X's N", who for a name (an entity of the night), what otherwise
    assert inverted_question("The Vela", "'s captain is", "name", strand=False) == "Who is the captain of The Vela?"
    assert inverted_question("Vofeth Lighthouse", "'s last keeper was", "name", strand=True) == "Who was Vofeth Lighthouse's last keeper?"
    assert inverted_question("Kell", "'s chief town is", "proper", strand=False) == "What is the chief town of Kell?"
    assert inverted_question("The Vela", "'s captain is", "proper", strand=True) == "Who is The Vela's captain?"
    assert inverted_question("Kell", "'s current governor is", "proper", strand=False) == "Who is the current governor of Kell?"
    assert inverted_question("Kell", "'s river is", "proper", strand=False) == "What is the river of Kell?"
    # not of that shape: a possessive with more after its copula, a role that is a number, no verb;
    # the form then asks with its fallback, still a question
    assert inverted_question("Ann Oru", "'s sister lives in", "proper", strand=False) is None
    assert inverted_question("Kell", "'s tower is", "number", strand=False) is None
    assert inverted_question("Kell", "'s home is the Gaibeind Auditorium, where most of its", "proper", strand=False) is None
    assert inverted_question("Ann Oru", "near", "proper", strand=False) is None
    front = next(f for f in QUESTION_FORMS if f.name == "front")
    assert front.render("Ann Oru", "'s sister lives in", "proper") == "Question: Tell me, Ann Oru's sister lives in which place?\nAnswer:"


def test_a_name_after_in_at_or_from_is_asked_as_a_place():
    """"Where was X born?", "In which place is X based?": the way people ask for a place, so a
    question in words no form uses ("In which city was X born?") is one word from a trained one.
    A year or a number after the same preposition keeps its own question; "near" does not make
    a place question ("Where is X near?")."""
    forms = {f.name: f for f in QUESTION_FORMS}
    assert inverted_question("Mara Quillon", "was born in", "proper", strand=True) == "Where was Mara Quillon born?"
    assert inverted_question("Mara Quillon", "was born in", "proper", strand=False) == "In which place was Mara Quillon born?"
    assert inverted_question("Ivo Dane", "comes from", "proper", strand=True) == "Where does Ivo Dane come from?"
    assert forms["strand"].render("Hiase Orchestra", "performs at the", "proper") == "Q: Where does Hiase Orchestra perform?\nA:"
    assert forms["which"].render("Hiase Orchestra", "is based in", "proper") == \
        "Q: According to what we know, Hiase Orchestra is based in which place?\nA:"
    assert inverted_question("Hiase Orchestra", "was founded in", "year", strand=True) == "What year was Hiase Orchestra founded in?"
    assert inverted_question("Mara Quillon", "worked for", "proper", strand=True) == "What did Mara Quillon work for?"
    assert inverted_question("Mara Quillon", "lives near", "proper", strand=True) == "What does Mara Quillon live near?"


def test_question_forms_ask_in_english_for_verbs_agents_and_articles():
    # the base form of a regular past tense: a silent e restored, none invented
    from lib.knowledge.forms import base_verb

    bases = {w: base_verb(w)[0] for w in ("released", "used", "retired", "located", "described", "named", "offered",
                                          "entered", "appeared", "visited", "opened", "worked", "agreed", "stopped")}
    assert bases == {"released": "release", "used": "use", "retired": "retire", "located": "locate",
                     "described": "describe", "named": "name", "offered": "offer", "entered": "enter",
                     "appeared": "appear", "visited": "visit", "opened": "open", "worked": "work", "agreed": "agree",
                     "stopped": "stop"}
    assert inverted_question("Tova Kiln", "released", "proper", strand=False) == "What did Tova Kiln release?"
    # a name after a passive "by" is an agent: whom, not what
    assert inverted_question("The Harl Bridge", "was designed by", "proper", strand=False) == "By whom was The Harl Bridge designed?"
    assert inverted_question("The Harl Bridge", "was designed by", "proper", strand=True) == "Who was The Harl Bridge designed by?"
    echo = next(f for f in QUESTION_FORMS if f.name == "echo")
    assert echo.render("The Harl Bridge", "was designed by", "proper") == "Question: The Harl Bridge was designed by whom?\nAnswer:"
    # a trailing article is not asked about ("won the what?"); a blank keeps it
    assert echo.render("Osk Valley", "lies beside the", "proper") == "Question: Osk Valley lies beside what?\nAnswer:"
    front = next(f for f in QUESTION_FORMS if f.name == "front")
    assert front.render("Brenna Ott", "won the", "proper") == "Question: What did Brenna Ott win?\nAnswer:"
    blank = next(f for f in QUESTION_FORMS if f.name == "blank")
    assert blank.render("Brenna Ott", "won the", "proper") == "Fill in the blank: Brenna Ott won the ____.\nAnswer:"
    # "is a <noun> by": a copula before a predicate noun is not inverted ("By whom is X a painting?")
    assert inverted_question("Grey Morning", "is a painting by", "proper", strand=False) is None
    assert front.render("Grey Morning", "is a painting by", "proper") == "Question: Tell me, Grey Morning is a painting by whom?\nAnswer:"


def test_each_qa_text_asks_every_fact_once_and_the_first_texts_cover_every_trained_form():
    recs = records("bio", 5, 12)
    texts = [r.text for r in recs]
    ids = [f"d{i}" for i in range(len(texts))]
    items = extract_facts(texts, ids, heldout_share=0.34)
    forms = augment_documents(ids, texts, items, forms_per_document=8)
    rendered = {}
    for a in forms:
        if a.form != "qa":
            continue
        facts = [f for f in items if f.doc_id == a.augments]
        assert len(a.text.split("\n\n")) == len(facts)  # every fact once
        for f in facts:
            for k, form in enumerate(QUESTION_FORMS):
                if f"{form.render(f.subject, f.relation, f.kind)} {f.answer}" in a.text:
                    rendered.setdefault(form.name, set()).add(f.id)
                    assert k in split_forms(f.id, QUESTION_FORMS, 0.34)[0]
    assert set(rendered) == {f.name for f in QUESTION_FORMS}, "every form is trained on some facts"


def test_cli_knowledge_runs_the_stage_on_a_curated_run(tmp_path):
    from typer.testing import CliRunner

    from cli.main import app

    recs = records("bio", 6, 12)
    curated = tmp_path / "ws" / "runs" / "r1" / "curated"
    curated.mkdir(parents=True)
    pq.write_table(pa.table({"id": [f"b{i}" for i in range(12)], "text": [r.text for r in recs]}), curated / "docs-0.parquet")
    out = CliRunner().invoke(app, ["knowledge", "--run-id", "r1", "--workspace", str(tmp_path / "ws"), "--show", "3"])
    assert out.exit_code == 0, out.output
    facts = read_facts(tmp_path / "ws" / "runs" / "r1" / "knowledge" / "facts.jsonl")
    assert facts and f"{len(facts)} fact items from 12 documents" in out.output
    assert facts[0].question in out.output.replace("\\n", "\n") or repr(facts[0].question) in out.output
    missing = CliRunner().invoke(app, ["knowledge", "--run-id", "nope", "--workspace", str(tmp_path / "ws")])
    assert missing.exit_code != 0 and "consolidate curate --run-id nope" in str(missing.exception or missing.output)
