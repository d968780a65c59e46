import pytest

from medreco.atomic import atomic_path, write_text_atomically


def test_a_failed_write_keeps_the_previous_file_and_leaves_no_temporary(tmp_path):
    target = write_text_atomically(tmp_path / "sub" / "index.json", "version 1")
    with pytest.raises(RuntimeError), atomic_path(target) as temporary:
        temporary.write_text("half a vers")
        raise RuntimeError("disk full")
    assert target.read_text() == "version 1"
    assert sorted(p.name for p in target.parent.iterdir()) == ["index.json"]


def test_a_finished_write_replaces_the_file(tmp_path):
    target = tmp_path / "a.txt"
    write_text_atomically(target, "old")
    with atomic_path(target) as temporary:
        assert temporary.parent == target.parent and temporary != target
        temporary.write_text("new")
    assert target.read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]
