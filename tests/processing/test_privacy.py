import logging

import numpy as np
import pydicom
import pytest

from io_helpers import FAKE_IDENTITY, box_phantom, write_series
from medreco.cli import main
from medreco.errors import MedicalImageError
from medreco.processing import MedReCoImageProcessor, deidentify_file, load_image
from medreco.processing.privacy import IDENTIFYING_KEYWORDS, identifying_values
from medreco.processing.writers import DicomIdentity, write_radiograph

SECRETS = ["Zebedee", "Quixote", "PID-99173", "19421107", "St Elsewhere", "ACC-55510"]


def assert_no_secret_under(folder):
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for secret in SECRETS:
                assert secret.encode() not in data, f"{secret!r} leaked into {path}"


def test_identifying_values_never_reach_outputs(tmp_path, caplog, capsys):
    study = tmp_path / "input"
    files = write_series(study / "ct", box_phantom())
    write_radiograph(np.random.rand(40, 40), (0.2, 0.2), study / "cxr.dcm", DicomIdentity(**FAKE_IDENTITY))
    assert all(secret in str(identifying_values(pydicom.dcmread(files[0]))) for secret in ["Zebedee", "PID-99173"])

    out = tmp_path / "out"
    caplog.set_level(logging.DEBUG)
    processor = MedReCoImageProcessor(
        recipes={"chest_ct": {"size": [20, 32, 32], "spacing": [2.0, 1.5, 1.5]}, "chest_xray": {"size": [1, 32, 32]}},
        tensor_cache_dir=str(out / "cache"),
    )
    processor([study / "ct"], "chest_ct")
    processor([study / "cxr.dcm"], "chest_xray")
    processor.save_pretrained(out / "processor")
    for target in (study / "ct", study / "cxr.dcm"):
        assert main(["inspect", str(target), "--json"]) == 0
    assert (
        main(["preprocess", str(study / "cxr.dcm"), "--modality", "chest_xray", "--out", str(out / "cxr.safetensors")])
        == 0
    )
    files[5].unlink()  # errors must not leak either
    with pytest.raises(MedicalImageError) as caught:
        load_image(study / "ct")
    assert main(["inspect", str(study / "ct")]) == 2

    captured = capsys.readouterr()
    (out / "stdout.txt").write_text(captured.out + captured.err)
    (out / "log.txt").write_text("\n".join(r.getMessage() for r in caplog.records))
    (out / "error.txt").write_text(str(caught.value))
    assert_no_secret_under(out)


def test_deidentify_removes_identity_and_keeps_pixels(tmp_path):
    files = write_series(tmp_path / "ct", box_phantom())
    assert main(["deidentify", str(tmp_path / "ct"), str(tmp_path / "clean")]) == 0
    assert_no_secret_under(tmp_path / "clean")
    cleaned = [pydicom.dcmread(p) for p in sorted((tmp_path / "clean").glob("*.dcm"))]
    original = pydicom.dcmread(files[0])
    assert not any(keyword in cleaned[0] for keyword in IDENTIFYING_KEYWORDS)
    assert cleaned[0].PatientIdentityRemoved == "YES"
    assert cleaned[0].SeriesInstanceUID != original.SeriesInstanceUID
    assert len({d.SeriesInstanceUID for d in cleaned}) == 1  # still one series
    np.testing.assert_array_equal(load_image(tmp_path / "clean").array, load_image(tmp_path / "ct").array)


def test_single_file_deidentification_is_atomic_and_repeatable(tmp_path):
    files = write_series(tmp_path / "ct", box_phantom(shape=(2, 8, 8), box=((0, 1), (0, 4), (0, 4))))
    first = deidentify_file(files[0], tmp_path / "a.dcm", salt="s")
    second = deidentify_file(files[0], tmp_path / "b.dcm", salt="s")
    assert pydicom.dcmread(first).SOPInstanceUID == pydicom.dcmread(second).SOPInstanceUID
    assert not list(tmp_path.glob(".*.tmp"))
    assert identifying_values(pydicom.dcmread(first)) == []
