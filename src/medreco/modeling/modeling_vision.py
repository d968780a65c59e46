"""The modality-routed MoE vision transformer for 2D images and 3D volumes (paper, section 4.5).

Input `(B, C, D, H, W)` with `D = 1` for radiographs and ultrasound. Patches are `1 x p x p` for
2D and `pd x p x p` for volumes. Spatial blocks attend within each slice; depth blocks attend
along depth at each in-plane location and run only when there is more than one depth token.
The depth-pooled tokens `(B, N, hidden)` are the contract with the conditioner and the VLM;
the per-depth tokens stay available."""

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
    """

    last_hidden_state: torch.Tensor | None = None
    depth_hidden_states: torch.Tensor | None = None
    pooler_output: torch.Tensor | None = None
    grid_size: tuple[int, int, int] | None = None
    attentions: tuple[torch.Tensor, ...] | None = None


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
        self.post_init()

    def forward(
        self,
        pixel_values: torch.Tensor,
        modality_ids: torch.Tensor,
        output_attentions: bool = False,
        **kwargs,
    ) -> MedReCoVisionOutput:
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


__all__ = ["MedReCoVisionModel", "MedReCoVisionOutput"]
