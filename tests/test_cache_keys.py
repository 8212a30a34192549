"""The data stages' cache keys hash packages, so code moved or added inside a package changes them."""

from __future__ import annotations

from tasks.cache_keys import code_digest, stage_key


def test_a_package_digest_sees_every_module_under_it(tmp_path, monkeypatch):
    pkg = tmp_path / "keypkg"
    (pkg / "inner").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "inner" / "__init__.py").write_text("")
    (pkg / "steps.py").write_text("def run():\n    return 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = code_digest(["keypkg"])
    assert code_digest(["keypkg"]) == first  # the same code: the same key
    (pkg / "filters.py").write_text("def keep():\n    return True\n")  # a new module no list names
    added = code_digest(["keypkg"])
    assert added != first
    (pkg / "filters.py").rename(pkg / "inner" / "filters.py")  # moved inside the package
    assert code_digest(["keypkg"]) not in (first, added)
    assert stage_key("s", [], {}, ["keypkg"]) != stage_key("s", [], {}, ["keypkg.steps"])


def test_the_curation_key_covers_the_modules_split_out_of_the_old_list():
    """lib.curation.text, kernels and filters did not exist when the stage listed its modules by
    hand; hashing the package covers them."""
    from tasks.data import CURATION_PACKAGES

    assert "lib.curation" in CURATION_PACKAGES and "lib.buffer" in CURATION_PACKAGES
    assert code_digest(CURATION_PACKAGES) != code_digest(["lib.curation.pipeline", "lib.buffer.ingest"])
