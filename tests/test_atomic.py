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


def test_written_files_and_folders_get_the_mode_the_umask_gives(tmp_path):
    """safetensors creates its files readable by the owner alone; what medreco writes follows the umask."""
    import os
    import stat

    import torch
    from safetensors.torch import save_file

    from medreco.atomic import atomic_folder, atomic_path

    for mask, file_mode, folder_mode in ((0o022, 0o644, 0o755), (0o077, 0o600, 0o700)):
        previous = os.umask(mask)
        try:
            with atomic_path(tmp_path / f"tensor-{mask:o}.safetensors") as temporary:
                save_file({"x": torch.zeros(2)}, temporary)
            with atomic_folder(tmp_path / f"model-{mask:o}") as folder:
                folder.mkdir()
                save_file({"x": torch.zeros(2)}, folder / "model.safetensors")
        finally:
            os.umask(previous)
        assert stat.S_IMODE((tmp_path / f"tensor-{mask:o}.safetensors").stat().st_mode) == file_mode
        assert stat.S_IMODE((tmp_path / f"model-{mask:o}" / "model.safetensors").stat().st_mode) == file_mode
        assert stat.S_IMODE((tmp_path / f"model-{mask:o}").stat().st_mode) == folder_mode
