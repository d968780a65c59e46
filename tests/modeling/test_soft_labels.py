"""CLIP-clinic's objectives: dynamic soft labels from thresholded in-batch similarity, InfoNCE against
soft targets with hard-negative texts as extra columns, and their place in the retrieval model's
image-report and statement alignment."""

import math

import pytest
import torch

import medreco
from conftest import images_2d
from medreco.modeling import (
    ReportSupervision,
    StatementBatch,
    TextBatch,
    dynamic_soft_labels,
    soft_target_infonce_loss,
    symmetric_infonce_loss,
)


def test_soft_labels_of_a_hand_built_batch():
    similarity = torch.tensor([[1.0, 0.95, 0.5], [0.95, 1.0, 0.85], [0.5, 0.85, 1.0]])
    labels = dynamic_soft_labels(similarity, threshold=0.9)
    # row 0: itself 1, column 1 (0.95 - 0.9) / 0.1 = 0.5, column 2 below the threshold
    torch.testing.assert_close(labels[0], torch.tensor([1.0, 0.5, 0.0]) / 1.5)
    torch.testing.assert_close(labels[2], torch.tensor([0.0, 0.0, 1.0]))
    torch.testing.assert_close(labels.sum(1), torch.ones(3))
    # a lower threshold shares more: 0.85 now counts, (0.85 - 0.8) / 0.2 = 0.25
    torch.testing.assert_close(dynamic_soft_labels(similarity, 0.8)[2], torch.tensor([0.0, 0.25, 1.0]) / 1.25)


def test_a_row_without_labels_keeps_its_own_text():
    vectors = torch.nn.functional.normalize(torch.tensor([[1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]), dim=-1)
    labels = dynamic_soft_labels(vectors @ vectors.t(), threshold=0.8)
    torch.testing.assert_close(labels[1], torch.tensor([0.0, 1.0, 0.0]))
    torch.testing.assert_close(labels[0], torch.tensor([0.5, 0.0, 0.5]))
    with pytest.raises(ValueError, match="threshold"):
        dynamic_soft_labels(vectors @ vectors.t(), threshold=1.0)


def test_soft_target_infonce_with_a_hard_negative_matches_hand_computation():
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    text = torch.tensor([[1.0, 0.0], [0.0, 1.0], [0.8, 0.6]])  # the third: a hard negative of image 0's report
    targets = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    scale = torch.tensor(0.0)
    logits = image @ text.t()
    image_to_text = [-(logits[i, i] - torch.logsumexp(logits[i], 0)).item() for i in range(2)]
    paired = logits[:, :2].t()  # text to image: the hard negative has no image and no row
    text_to_image = [-(paired[i, i] - torch.logsumexp(paired[i], 0)).item() for i in range(2)]
    expected = (sum(image_to_text) / 2 + sum(text_to_image) / 2) / 2
    loss = soft_target_infonce_loss(image, text, scale, targets)
    assert loss.item() == pytest.approx(expected, rel=1e-6)
    # the hard negative only adds to the image-to-text denominator: the loss rises
    assert loss > symmetric_infonce_loss(image, text[:2], scale)
    with pytest.raises(ValueError, match="targets must be"):
        soft_target_infonce_loss(image, text, scale, targets[:, :2])


def test_soft_targets_equal_to_the_softmax_leave_only_their_entropy():
    image = torch.eye(3)
    text = image.clone()
    scale = torch.tensor(math.log(5.0))
    probabilities = (5.0 * image @ text.t()).softmax(-1)  # a symmetric matrix: both directions agree
    entropy = -(probabilities * probabilities.log()).sum(-1).mean()
    loss = soft_target_infonce_loss(image, text, scale, probabilities)
    assert loss.item() == pytest.approx(entropy.item(), rel=1e-5)  # KL(targets || softmax) = 0


def clinic_model(**config):
    torch.manual_seed(0)
    return medreco.create_model("retrieval", "tiny", **config).eval()


def texts(count, seed, length=7):
    generator = torch.Generator().manual_seed(seed)
    return TextBatch(torch.randint(1000, 2000, (count, length), generator=generator), torch.ones(count, length).long())


def alignment_inputs(batch=4):
    return {
        "pixel_values": images_2d(batch),
        "modality_ids": torch.zeros(batch, dtype=torch.long),
        "reports": texts(batch, 1),
    }


def test_without_soft_labels_or_negatives_the_report_loss_is_clips():
    model = clinic_model()
    inputs = alignment_inputs()
    with torch.no_grad():
        output = model(**inputs)
        expected = symmetric_infonce_loss(output.image_embeds, output.text_embeds, model.logit_scale)
        empty = model(**inputs, report_supervision=ReportSupervision())
    torch.testing.assert_close(output.loss, expected)
    torch.testing.assert_close(empty.loss, expected)


def test_clinical_soft_labels_share_the_target_of_studies_with_the_same_findings():
    model = clinic_model(clinical_soft_label_threshold=0.8)
    inputs = alignment_inputs()
    same = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]])  # two pairs of identical label vectors
    distinct = torch.eye(4)
    with torch.no_grad():
        output = model(**inputs, report_supervision=ReportSupervision(clinical_labels=same))
        grouped = symmetric_infonce_loss(
            output.image_embeds, output.text_embeds, model.logit_scale, torch.tensor([0, 0, 1, 1])
        )
        alone = model(**inputs, report_supervision=ReportSupervision(clinical_labels=distinct)).loss
        plain = symmetric_infonce_loss(output.image_embeds, output.text_embeds, model.logit_scale)
    torch.testing.assert_close(output.loss, grouped)
    torch.testing.assert_close(alone, plain)
    with pytest.raises(ValueError, match="clinical_labels"):
        model(**inputs)


def test_hard_negative_reports_join_the_softmax_and_need_labels_of_their_own():
    model = clinic_model(clinical_soft_label_threshold=0.8)
    inputs = alignment_inputs()
    labels = torch.eye(4)
    negatives = texts(2, 9)
    with torch.no_grad():
        plain = model(**inputs, report_supervision=ReportSupervision(clinical_labels=labels)).loss
        hard = model(
            **inputs,
            report_supervision=ReportSupervision(negatives, torch.cat([labels, torch.eye(4)[[0, 1]] * 0])),
        ).loss
    assert hard > plain
    with pytest.raises(ValueError, match="one row per report and hard negative"):
        model(**inputs, report_supervision=ReportSupervision(negatives, labels))


def test_text_soft_labels_treat_a_duplicate_report_as_a_second_target():
    model = clinic_model(text_soft_label_threshold=0.9)
    inputs = alignment_inputs()
    reports = inputs["reports"]
    duplicated = TextBatch(reports.input_ids.clone(), reports.attention_mask)
    duplicated.input_ids[1] = duplicated.input_ids[0]
    with torch.no_grad():
        output = model(**{**inputs, "reports": duplicated})
        grouped = symmetric_infonce_loss(
            output.image_embeds, output.text_embeds, model.logit_scale, torch.tensor([0, 0, 1, 2])
        )
    torch.testing.assert_close(output.loss, grouped)


def test_hard_negative_statements_are_extra_texts_of_their_group():
    model = clinic_model()
    inputs = alignment_inputs()
    pairs = torch.tensor([[0, 0], [0, 1], [1, 2]])
    statements = StatementBatch(texts(2, 3, 3), texts(3, 4, 5), pairs, torch.tensor([0, 1, 2]))
    flipped = StatementBatch(
        texts(2, 3, 3), texts(3, 4, 5), pairs, torch.tensor([0, 1, 2]), texts(2, 5, 5), torch.tensor([3, 4])
    )
    # a "hard negative" that says what statement 0 says (same group) is no negative: a second target
    same = StatementBatch(
        texts(2, 3, 3), texts(3, 4, 5), pairs, torch.tensor([0, 1, 2]), texts(1, 4, 5), torch.tensor([0])
    )
    with torch.no_grad():
        base = model(**inputs, statements=statements).statement_loss
        harder = model(**inputs, statements=flipped).statement_loss
        duplicate = model(**inputs, statements=same).statement_loss
    assert harder > base
    assert duplicate != pytest.approx(harder.item())
    with pytest.raises(ValueError, match="group ids"):
        model(**inputs, statements=StatementBatch(texts(2, 3, 3), texts(3, 4, 5), pairs, None, texts(1, 5, 5), None))


def test_soft_label_thresholds_are_checked():
    with pytest.raises(Exception, match="text_soft_label_threshold"):
        medreco.create_model("retrieval", "tiny", text_soft_label_threshold=1.5)


def test_a_studys_own_hard_negative_never_shares_its_target():
    model = clinic_model(clinical_soft_label_threshold=0.8)
    inputs = alignment_inputs()
    labels = torch.eye(4)
    negatives = texts(2, 9)
    # the hard negatives of rows 0 and 1 carry their studies' own label vectors: cosine 1, above tau_c
    clinical = torch.cat([labels, labels[[0, 1]]])
    with torch.no_grad():
        model.config.clinical_soft_label_threshold = None  # the embeddings only
        output = model(**inputs)
        model.config.clinical_soft_label_threshold = 0.8
        negative_embeds = model._embed(negatives)
        texts_all = torch.cat([output.text_embeds, negative_embeds])
        shared = model(**inputs, report_supervision=ReportSupervision(negatives, clinical)).loss
        masked = model(**inputs, report_supervision=ReportSupervision(negatives, clinical, torch.tensor([0, 1]))).loss
        hard = soft_target_infonce_loss(output.image_embeds, texts_all, model.logit_scale, torch.eye(4, 6))
    torch.testing.assert_close(masked, hard)
    assert not torch.isclose(shared, masked)
