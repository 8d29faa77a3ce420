"""The vanilla Transformer core (Vaswani et al., 2017): the exact reference everything else is compared to."""
from .causal_mask import RECORD as CAUSAL_MASK
from .cross_attention import RECORD as CROSS_ATTENTION
from .decoder_layer import RECORD as DECODER_LAYER
from .encoder_layer import RECORD as ENCODER_LAYER
from .ffn import RECORD as FFN
from .layer_norm import RECORD as LAYER_NORM
from .multi_head import RECORD as MULTI_HEAD
from .padding_mask import RECORD as PADDING_MASK
from .sdpa import RECORD as SDPA
from .sinusoidal_pe import RECORD as SINUSOIDAL_PE
from .softmax import RECORD as SOFTMAX
from .transformer import RECORD as TRANSFORMER

#: The family's catalogue records, in catalogue order (each declared in its mechanism's module).
RECORDS = (
    SOFTMAX,
    SDPA,
    CAUSAL_MASK,
    PADDING_MASK,
    MULTI_HEAD,
    CROSS_ATTENTION,
    SINUSOIDAL_PE,
    LAYER_NORM,
    FFN,
    ENCODER_LAYER,
    DECODER_LAYER,
    TRANSFORMER,
)
