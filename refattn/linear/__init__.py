"""Linearised attention (survey §3.2): feature maps φ and the three multiplication orders."""
from .attention import linear_attention
from .feature_maps import elu_feature_map

__all__ = ["elu_feature_map", "linear_attention"]
