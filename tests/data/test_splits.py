import pytest

from medreco.data.mining.splits import LeakageError, assign_splits, check_patients, check_sample, study_splits
from medreco.data.phantom import PhantomConfig, generate_cohort


def test_assignment_is_stable_deterministic_and_proportional():
    patients = [f"P{i:05d}" for i in range(5000)]
    splits = assign_splits(patients)
    counts = {name: sum(1 for s in splits.values() if s == name) for name in ("train", "validation", "test")}
    assert abs(counts["train"] / 5000 - 0.8) < 0.03 and abs(counts["test"] / 5000 - 0.1) < 0.02
    grown = assign_splits([*patients, "P99999"])
    assert all(grown[p] == splits[p] for p in patients)  # adding patients never moves others
    assert assign_splits(patients, salt="other") != splits
    with pytest.raises(ValueError, match="sum to 1"):
        assign_splits(patients, {"train": 0.9, "test": 0.2})


def test_no_patient_in_two_splits_and_derived_samples_share_a_split(tmp_path):
    records = generate_cohort(PhantomConfig(num_patients=12, size="tiny", seed=1), tmp_path, progress=False)
    study_patients = {r.study_id: r.patient_id for r in records}
    study_split = study_splits(study_patients, assign_splits(study_patients.values(), {"train": 0.5, "test": 0.5}))
    check_patients(study_patients, study_split)
    for record in records:  # every prior/current pair stays in one split
        if record.prior_study_id:
            check_sample([record.prior_study_id, record.study_id], study_split, "longitudinal pair")
    by_split = {}
    for study, split in study_split.items():
        by_split.setdefault(split, []).append(study)
    assert set(by_split) == {"train", "test"}
    with pytest.raises(LeakageError, match="several splits"):
        check_sample([by_split["train"][0], by_split["test"][0]], study_split, "triplet")
    broken = dict(study_split)
    broken[records[1].study_id] = "test" if broken[records[1].study_id] == "train" else "train"
    with pytest.raises(LeakageError, match="appears in splits"):
        check_patients(study_patients, broken)
