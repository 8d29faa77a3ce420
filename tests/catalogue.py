"""The catalogue's ids, family by family, in catalogue order: what the registry grows into.

The registry must hold only these ids, each under its family, in this order. The ids of the survey's families
follow its taxonomy (T. Lin et al., "A Survey of Transformers", arXiv:2106.04554, §2 and §4.1-§4.6);
"positional" holds the positional encodings that replaced the sinusoids, and "beyond" the attention-free and
hybrid mechanisms outside the survey.
"""

CATALOGUE = {
    "vanilla": (
        "softmax", "sdpa", "causal_mask", "padding_mask", "multi_head", "cross_attention", "sinusoidal_pe",
        "layer_norm", "ffn", "encoder_layer", "decoder_layer", "transformer",
    ),
    "sparse": (
        "global", "band", "dilated", "strided", "random", "block_local", "star_transformer", "longformer", "etc",
        "bigbird", "sparse_transformer", "bp_transformer", "image_transformer", "axial", "routing", "reformer_lsh",
        "sac", "sinkhorn",
    ),
    "linear": (
        "linear_elu", "performer_positive", "performer_trig", "efficient_attention", "rfa", "delta_rule",
    ),
    "compressed": (
        "clustered", "improved_clustered", "informer", "mca", "set_transformer", "luna", "linformer",
        "poolingformer",
    ),
    "lowrank": (
        "lowrank_band", "nystrom_csalr", "nystromformer",
    ),
    "prior": (
        "gaussian_prior", "gaussian_transformer", "realformer", "predictive_attention", "lazyformer", "camtl",
        "average_attention", "hardcoded_gaussian", "synthesizer_dense", "synthesizer_random",
    ),
    "heads": (
        "disagreement_reg", "pattern_aux_loss", "talking_heads", "collaborative_heads", "adaptive_span",
        "multi_scale", "capsule_routing", "multi_query", "head_size",
    ),
    "positional": (
        "learned_pe", "relative_pe", "transformer_xl", "t5_bias", "alibi", "rope", "kerple", "deberta",
    ),
    "beyond": (
        "fnet", "aft", "gmlp", "topk", "sinkformer", "xcit", "skyformer", "scatterbrain", "long_short", "gau",
    ),
}
