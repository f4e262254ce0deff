"""A zoo of vision and diffusion models (timm, torchvision, diffusers), built small.

Random weights, no downloads, small inputs and, where the model takes them, small
configs (fewer blocks, narrower layers), so every run can be compared with eager in a
test. The models are the libraries' own code: timm's ``_assert`` and ``Format``
handling, torchvision's ``_log_api_usage_once`` and ``StochasticDepth``, diffusers'
config-registered modules, ``apply_forward_hook`` and PEFT decorators.

The timm entries are the models of torch's own benchmark list
(``benchmarks/dynamo/timm_models_list.txt``); the torchvision entries its
classification families; the diffusers entries a UNet, a VAE and a DiT.
``tools/setup_vision.sh`` installs the libraries; the default environment has none
of them (``test_vision_zoo.py`` skips there).
"""

from __future__ import annotations

from typing import Any

import torch

from .zoo import ZooCase, ZooModel


def _image(size: int = 64, batch: int = 2, channels: int = 3) -> torch.Tensor:
    return torch.randn(batch, channels, size, size)


def _logits(out: Any) -> list[torch.Tensor]:
    return [out]


def _loss_and_logits(out: Any) -> list[torch.Tensor]:
    """Training: a scalar loss first (``backward`` starts there), then the logits."""
    return [out.pow(2).mean(), out]


def _timm(name: str, size: int = 64, mode: str = "inference", **kwargs: Any) -> ZooCase:
    import timm

    torch.manual_seed(0)
    model = timm.create_model(name, pretrained=False, num_classes=10, **kwargs)
    model = model.train() if mode == "train" else model.eval()
    outputs = _loss_and_logits if mode == "train" else _logits
    return ZooCase(model, (_image(size),), mode=mode, outputs=outputs)


def _tv(name: str, size: int = 64, mode: str = "inference", **kwargs: Any) -> ZooCase:
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None, num_classes=10, **kwargs)
    model = model.train() if mode == "train" else model.eval()
    outputs = _loss_and_logits if mode == "train" else _logits
    return ZooCase(model, (_image(size),), mode=mode, outputs=outputs)


# -- timm: torch's benchmark list, small -------------------------------------------------


def timm_beit() -> ZooCase:
    return _timm("beit_base_patch16_224", size=32, img_size=32, patch_size=8, embed_dim=64,
                 depth=2, num_heads=2)


def timm_convnextv2() -> ZooCase:
    return _timm("convnextv2_atto", size=64)


def timm_deit() -> ZooCase:
    return _timm("deit_tiny_patch16_224", size=32, img_size=32, patch_size=8, depth=2)


def timm_deit_train() -> ZooCase:
    return _timm("deit_tiny_patch16_224", size=32, mode="train", img_size=32, patch_size=8,
                 depth=2)


def timm_nfnet() -> ZooCase:
    return _timm("nfnet_l0", size=64)


def timm_ghostnet() -> ZooCase:
    return _timm("ghostnet_100", size=64)


def timm_inception_v3() -> ZooCase:
    return _timm("inception_v3", size=96)


def timm_mobilenetv2() -> ZooCase:
    return _timm("mobilenetv2_100", size=64)


def timm_mobilenetv3() -> ZooCase:
    return _timm("mobilenetv3_large_100", size=64)


def timm_mobilevit() -> ZooCase:
    return _timm("mobilevit_xxs", size=64)


def timm_repvgg() -> ZooCase:
    return _timm("repvgg_a0", size=64)


def timm_swin() -> ZooCase:
    return _timm("swin_base_patch4_window7_224", size=64, img_size=64, window_size=2,
                 embed_dim=32, depths=(1, 1, 2, 1), num_heads=(1, 2, 2, 4))


def timm_efficientnet() -> ZooCase:
    return _timm("tf_efficientnet_b0", size=64)


def timm_visformer() -> ZooCase:
    return _timm("visformer_tiny", size=64, img_size=64)


def timm_vit_dinov2() -> ZooCase:
    return _timm("vit_small_patch14_dinov2", size=28, img_size=28, depth=2)


def timm_vit_siglip() -> ZooCase:
    return _timm("vit_base_patch16_siglip_224", size=32, img_size=32, patch_size=8,
                 embed_dim=64, depth=2, num_heads=2)


# -- torchvision classification families ----------------------------------------------


def tv_resnet() -> ZooCase:
    return _tv("resnet18", size=64)


def tv_resnet_train() -> ZooCase:
    # 64x64 reaches a 2x2 map (8 values per channel in the last batch norms); at 32x32 its
    # 1x1 map normalized over 2 values, where eager's own rounding decides the gradients
    return _tv("resnet18", size=64, mode="train")


def tv_mobilenet_v3() -> ZooCase:
    return _tv("mobilenet_v3_small", size=64)


def tv_efficientnet() -> ZooCase:
    return _tv("efficientnet_b0", size=64)


def tv_convnext() -> ZooCase:
    return _tv("convnext_tiny", size=64)


def tv_swin() -> ZooCase:
    return _tv("swin_t", size=64)


def tv_vit() -> ZooCase:
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=64, mlp_dim=128,
        num_classes=10,
    ).eval()
    return ZooCase(model, (_image(32),), outputs=_logits)


def tv_regnet() -> ZooCase:
    return _tv("regnet_y_400mf", size=64)


def tv_densenet() -> ZooCase:
    return _tv("densenet121", size=64)


def tv_shufflenet() -> ZooCase:
    return _tv("shufflenet_v2_x0_5", size=64)


def tv_squeezenet() -> ZooCase:
    return _tv("squeezenet1_1", size=64)


def tv_maxvit() -> ZooCase:
    return _tv("maxvit_t", size=224)


# -- diffusers, tiny configs ----------------------------------------------------------------


def _sample(out: Any) -> list[torch.Tensor]:
    return [out.sample]


def diffusers_unet() -> ZooCase:
    from diffusers import UNet2DConditionModel

    torch.manual_seed(0)
    model = UNet2DConditionModel(
        sample_size=16, in_channels=4, out_channels=4, layers_per_block=1,
        block_out_channels=(32, 64), down_block_types=("CrossAttnDownBlock2D", "DownBlock2D"),
        up_block_types=("UpBlock2D", "CrossAttnUpBlock2D"), cross_attention_dim=32,
        attention_head_dim=8, norm_num_groups=16,
    ).eval()
    args = (torch.randn(2, 4, 16, 16), torch.tensor([10, 500]), torch.randn(2, 7, 32))
    return ZooCase(model, args, outputs=_sample)


def diffusers_vae() -> ZooCase:
    from diffusers import AutoencoderKL

    torch.manual_seed(0)
    model = AutoencoderKL(
        in_channels=3, out_channels=3, latent_channels=4, block_out_channels=(32, 64),
        down_block_types=("DownEncoderBlock2D", "DownEncoderBlock2D"),
        up_block_types=("UpDecoderBlock2D", "UpDecoderBlock2D"), layers_per_block=1,
        norm_num_groups=16, sample_size=32,
    ).eval()
    # sample_posterior=False: the mode of the latent distribution, no random draw
    return ZooCase(model, (_image(32),), {"sample_posterior": False}, outputs=_sample)


def diffusers_dit() -> ZooCase:
    from diffusers import DiTTransformer2DModel

    torch.manual_seed(0)
    model = DiTTransformer2DModel(
        num_attention_heads=2, attention_head_dim=16, in_channels=4, out_channels=8,
        num_layers=2, sample_size=8, patch_size=2, num_embeds_ada_norm=1000,
        norm_num_groups=16,
    ).eval()
    args = (torch.randn(2, 4, 8, 8),)
    kwargs = {"timestep": torch.tensor([10, 500]), "class_labels": torch.tensor([1, 7])}
    return ZooCase(model, args, kwargs, outputs=_sample)


ZOO: list[ZooModel] = [
    ZooModel("timm_beit", timm_beit),
    ZooModel("timm_convnextv2", timm_convnextv2, slow=True),
    ZooModel("timm_deit", timm_deit),
    ZooModel("timm_deit_train", timm_deit_train, "training: loss and gradients", slow=True),
    ZooModel("timm_nfnet", timm_nfnet, slow=True),
    ZooModel("timm_ghostnet", timm_ghostnet, slow=True),
    ZooModel("timm_inception_v3", timm_inception_v3, slow=True),
    ZooModel("timm_mobilenetv2", timm_mobilenetv2, slow=True),
    ZooModel("timm_mobilenetv3", timm_mobilenetv3, slow=True),
    ZooModel("timm_mobilevit", timm_mobilevit, slow=True),
    ZooModel("timm_repvgg", timm_repvgg, slow=True),
    ZooModel("timm_swin", timm_swin, slow=True),
    ZooModel("timm_efficientnet", timm_efficientnet, slow=True),
    ZooModel("timm_visformer", timm_visformer, slow=True),
    ZooModel("timm_vit_dinov2", timm_vit_dinov2),
    ZooModel("timm_vit_siglip", timm_vit_siglip, slow=True),
    ZooModel("tv_resnet", tv_resnet),
    ZooModel("tv_resnet_train", tv_resnet_train, "training: loss and gradients", slow=True),
    ZooModel("tv_mobilenet_v3", tv_mobilenet_v3, slow=True),
    ZooModel("tv_efficientnet", tv_efficientnet, "issue 29's internal error", slow=True),
    ZooModel("tv_convnext", tv_convnext, "issue 29's internal error", slow=True),
    ZooModel("tv_swin", tv_swin, slow=True),
    ZooModel("tv_vit", tv_vit),
    ZooModel("tv_regnet", tv_regnet, slow=True),
    ZooModel("tv_densenet", tv_densenet, slow=True),
    ZooModel("tv_shufflenet", tv_shufflenet, slow=True),
    ZooModel("tv_squeezenet", tv_squeezenet),
    ZooModel("tv_maxvit", tv_maxvit, slow=True),
    ZooModel("diffusers_unet", diffusers_unet, slow=True),
    ZooModel("diffusers_vae", diffusers_vae, slow=True),
    ZooModel("diffusers_dit", diffusers_dit),
]

_BY_NAME = {m.name: m for m in ZOO}


def build(name: str) -> ZooCase:
    return _BY_NAME[name].build()
