"""The modality-routed MoE vision transformer for 2D images and 3D volumes (paper, section 4.5).

Input `(B, C, D, H, W)` with `D = 1` for radiographs and ultrasound. Patches are `1 x p x p` for
2D and `pd x p x p` for volumes. Spatial blocks attend within each slice; depth blocks attend
along depth at each in-plane location and run only when there is more than one depth token.
The depth-pooled tokens `(B, N, hidden)` are the contract with the conditioner and the VLM;
the per-depth tokens stay available.

With `num_temporal_layers > 0` the encoder also fuses a study with its prior (BioViL-T, Eq. 1):
`temporal_hidden_state` is `P_diff`, the current image's tokens after attending to the prior's,
and `last_hidden_state` stays the static `P_curr`."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers.utils import ModelOutput

from .blocks import MedReCoBlock, check_modality_ids
from .configuration_vision import MedReCoVisionConfig
from .modeling_utils import MedReCoPreTrainedModel


@dataclass
class MedReCoVisionOutput(ModelOutput):
    """Outputs of [`MedReCoVisionModel`].

    last_hidden_state: `(B, N, hidden)` tokens averaged over depth (N = 576 at the paper's size).
    depth_hidden_states: `(B, D', N, hidden)` tokens for each depth position (D' = 1 for 2D).
    pooler_output: `(B, hidden)` mean of all tokens.
    grid_size: `(D', h, w)` token grid of this input.
    attentions: per-block attention weights when `output_attentions=True`.
    temporal_hidden_state: `(B, N, hidden)` BioViL-T's `P_diff` when a prior (or `has_prior`) was
        given to a temporal encoder: fused with the prior, or the missing-prior token where none.
    """

    last_hidden_state: torch.Tensor | None = None
    depth_hidden_states: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    grid_size: tuple[int, int, int] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None
    temporal_hidden_state: torch.Tensor | None = None


def sinusoidal_positions_2d(height: int, width: int, dim: int) -> torch.Tensor:
    """Fixed 2D sine-cosine position encodings `(height * width, dim)`: half the channels encode the
    row, half the column (MAE's layout); channels beyond a multiple of 4 stay zero."""
    quarter = dim // 4
    omega = 1.0 / 10000 ** (torch.arange(quarter, dtype=torch.float32) / max(quarter, 1))
    rows, cols = torch.meshgrid(
        torch.arange(height, dtype=torch.float32), torch.arange(width, dtype=torch.float32), indexing="ij"
    )
    angles = [rows.reshape(-1, 1) * omega, cols.reshape(-1, 1) * omega]
    encoding = torch.cat([f(a) for a in angles for f in (torch.sin, torch.cos)], dim=1)
    return nn.functional.pad(encoding, (0, dim - encoding.shape[1]))


class MedReCoTemporalFusion(nn.Module):
    """BioViL-T's multi-image fusion `A_img` (Eq. 1): the current and the prior image's tokens, each
    plus 2D sinusoidal positions and a learned temporal embedding at every block's input, through
    `num_temporal_layers` self-attention blocks with modality experts; `P_diff` is the
    layer-normalised current half. Studies without a prior get the learned missing-prior token
    replicated over the grid, and the blocks do not run for them. No registration is needed: the
    current tokens attend to every prior token."""

    def __init__(self, config: MedReCoVisionConfig):
        super().__init__()
        self.temporal_embedding = nn.Parameter(torch.zeros(2, config.hidden_size))  # [current, prior]
        self.missing_prior = nn.Parameter(torch.zeros(1, config.hidden_size))
        self.layers = nn.ModuleList(MedReCoBlock(config) for _ in range(config.num_temporal_layers))
        self.norm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)

    def forward(
        self,
        current: torch.Tensor,
        prior: torch.Tensor | None,
        modality_ids: torch.Tensor,
        has_prior: torch.Tensor | None = None,
        grid: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """current, prior `(B, N, hidden)` (prior None: no study has one); has_prior `(B,)` bool
        (None: every study with a given prior has one); grid `(h, w)` with `h * w = N` (None: square)."""
        batch, tokens, hidden = current.shape
        fused = self.missing_prior.to(current.dtype).expand(batch, tokens, hidden).clone()
        if prior is None:
            if has_prior is not None and has_prior.any():
                raise ValueError("has_prior marks studies with a prior, but no prior tokens were given")
            return fused
        if prior.shape != current.shape:
            raise ValueError(f"prior tokens {tuple(prior.shape)} must match the current ones {tuple(current.shape)}")
        rows = torch.ones(batch, dtype=torch.bool, device=current.device) if has_prior is None else has_prior.bool()
        if not rows.any():
            return fused
        if grid is None:
            side = round(tokens**0.5)
            if side * side != tokens:
                raise ValueError(f"{tokens} tokens are not a square grid; pass grid=(h, w)")
            grid = (side, side)
        positions = sinusoidal_positions_2d(*grid, hidden).to(current.device, current.dtype)
        times = self.temporal_embedding.to(current.dtype)
        offsets = torch.cat([positions + times[0], positions + times[1]])  # (2N, hidden)
        index = rows.nonzero(as_tuple=True)[0]
        hidden_states = torch.cat([current[index], prior[index]], dim=1)
        experts = modality_ids.to(current.device)[index]
        for layer in self.layers:
            hidden_states, _ = layer(hidden_states + offsets, experts)
        return fused.index_put((index,), self.norm(hidden_states[:, :tokens]))


class MedReCoVisionEmbeddings(nn.Module):
    """Patch embeddings (separate for 2D and 3D) plus learned positions that interpolate to any grid."""

    def __init__(self, config: MedReCoVisionConfig):
        super().__init__()
        self.config = config
        patch, depth_patch = config.patch_size, config.depth_patch_size
        self.patch_embedding_2d = nn.Conv3d(
            config.num_channels, config.hidden_size, kernel_size=(1, patch, patch), stride=(1, patch, patch)
        )
        self.patch_embedding_3d = nn.Conv3d(
            config.num_channels,
            config.hidden_size,
            kernel_size=(depth_patch, patch, patch),
            stride=(depth_patch, patch, patch),
        )
        grid = config.grid_size
        self.spatial_position_embedding = nn.Parameter(torch.zeros(1, config.hidden_size, grid, grid))
        self.depth_position_embedding = nn.Parameter(torch.zeros(1, config.hidden_size, config.num_depth_positions))

    def check_input(self, pixel_values: torch.Tensor) -> None:
        config = self.config
        if pixel_values.ndim != 5:
            raise ValueError(
                f"pixel_values must be (batch, channels, depth, height, width); got shape {tuple(pixel_values.shape)}"
            )
        _, channels, depth, height, width = pixel_values.shape
        if channels != config.num_channels:
            raise ValueError(f"expected {config.num_channels} channel(s), got {channels}")
        if height % config.patch_size or width % config.patch_size:
            raise ValueError(f"height and width ({height}x{width}) must be multiples of patch_size {config.patch_size}")
        if depth > 1 and depth % config.depth_patch_size:
            raise ValueError(f"volume depth {depth} must be a multiple of depth_patch_size {config.depth_patch_size}")

    def forward(self, pixel_values: torch.Tensor) -> torch.Tensor:
        """Returns `(B, D', h, w, hidden)`."""
        self.check_input(pixel_values)
        embed = self.patch_embedding_2d if pixel_values.shape[2] == 1 else self.patch_embedding_3d
        tokens = embed(pixel_values.to(embed.weight.dtype))  # (B, hidden, D', h, w)
        depth, height, width = tokens.shape[2:]
        spatial = self.spatial_position_embedding
        if spatial.shape[-2:] != (height, width):
            spatial = nn.functional.interpolate(spatial, size=(height, width), mode="bicubic", align_corners=False)
        tokens = tokens + spatial.unsqueeze(2).to(tokens.dtype)
        if depth > 1:
            along_depth = self.depth_position_embedding
            if along_depth.shape[-1] != depth:
                along_depth = nn.functional.interpolate(along_depth, size=depth, mode="linear", align_corners=False)
            tokens = tokens + along_depth[..., None, None].to(tokens.dtype)
        return tokens.permute(0, 2, 3, 4, 1)


class MedReCoVisionModel(MedReCoPreTrainedModel):
    """MoE-ViT over 2D and 3D medical images with one expert MLP per modality family."""

    config: MedReCoVisionConfig
    config_class = MedReCoVisionConfig
    main_input_name = "pixel_values"
    input_modalities = ("image",)

    def __init__(self, config: MedReCoVisionConfig):
        super().__init__(config)
        self.embeddings = MedReCoVisionEmbeddings(config)
        self.spatial_layers = nn.ModuleList(MedReCoBlock(config) for _ in range(config.num_spatial_layers))
        self.depth_layers = nn.ModuleList(MedReCoBlock(config) for _ in range(config.num_depth_layers))
        self.post_layernorm = nn.LayerNorm(config.hidden_size, eps=config.layer_norm_eps)
        self.temporal = MedReCoTemporalFusion(config) if config.num_temporal_layers else None
        self.post_init()

    def fuse_prior(
        self,
        current_tokens: torch.Tensor,
        prior_tokens: torch.Tensor | None,
        modality_ids: torch.Tensor,
        has_prior: torch.Tensor | None = None,
        grid: tuple[int, int] | None = None,
    ) -> torch.Tensor:
        """BioViL-T's `P_diff` `(B, N, hidden)` from static tokens (`last_hidden_state` of each
        study): what a trainer calls on cached tokens. Swap the two arguments for the reversed pair."""
        if self.temporal is None:
            raise ValueError("this vision encoder has no prior-image fusion; set num_temporal_layers > 0 in its config")
        modality_ids = check_modality_ids(modality_ids, current_tokens.shape[0], self.config.num_experts)
        return self.temporal(current_tokens, prior_tokens, modality_ids, has_prior, grid)

    def forward(
        self,
        pixel_values: torch.Tensor,
        modality_ids: torch.Tensor,
        output_attentions: bool = False,
        prior_pixel_values: torch.Tensor | None = None,
        has_prior: torch.Tensor | None = None,
        **kwargs,
    ) -> MedReCoVisionOutput:
        """`prior_pixel_values` (same shape; rows where `has_prior` is False are ignored, e.g.
        zeros) or `has_prior` alone (all False) fill `temporal_hidden_state` on a temporal encoder."""
        output = self.encode(pixel_values, modality_ids, output_attentions)
        if self.temporal is not None and (prior_pixel_values is not None or has_prior is not None):
            prior_tokens = None
            if prior_pixel_values is not None:
                prior_tokens = self.encode(prior_pixel_values, modality_ids).last_hidden_state
            output.temporal_hidden_state = self.fuse_prior(
                output.last_hidden_state, prior_tokens, modality_ids, has_prior, output.grid_size[1:]
            )
        return output

    def encode(
        self, pixel_values: torch.Tensor, modality_ids: torch.Tensor, output_attentions: bool = False
    ) -> MedReCoVisionOutput:
        """The static encoder: one study's tokens, nothing of its prior."""
        batch = pixel_values.shape[0]
        modality_ids = check_modality_ids(modality_ids, batch, self.config.num_experts).to(pixel_values.device)
        tokens = self.embeddings(pixel_values)
        _, depth, height, width, hidden = tokens.shape
        attentions = []

        # Spatial stage: each slice of each sample is one sequence of h*w tokens.
        hidden_states = tokens.reshape(batch * depth, height * width, hidden)
        slice_modalities = modality_ids.repeat_interleave(depth)
        for block in self.spatial_layers:
            hidden_states, weights = block(hidden_states, slice_modalities, output_attentions)
            attentions.append(weights)

        # Depth stage: each in-plane location of each sample is one sequence of D' tokens.
        hidden_states = hidden_states.reshape(batch, depth, height * width, hidden)
        if depth > 1 and len(self.depth_layers):
            hidden_states = hidden_states.transpose(1, 2).reshape(batch * height * width, depth, hidden)
            location_modalities = modality_ids.repeat_interleave(height * width)
            for block in self.depth_layers:
                hidden_states, weights = block(hidden_states, location_modalities, output_attentions)
                attentions.append(weights)
            hidden_states = hidden_states.reshape(batch, height * width, depth, hidden).transpose(1, 2)

        depth_hidden_states = self.post_layernorm(hidden_states)
        pooled_tokens = depth_hidden_states.mean(dim=1)
        return MedReCoVisionOutput(
            last_hidden_state=pooled_tokens,
            depth_hidden_states=depth_hidden_states,
            pooler_output=pooled_tokens.mean(dim=1),
            grid_size=(depth, height, width),
            attentions=tuple(attentions) if output_attentions else None,
        )


__all__ = ["MedReCoTemporalFusion", "MedReCoVisionModel", "MedReCoVisionOutput", "sinusoidal_positions_2d"]
