"""The vanilla Transformer core (Vaswani et al., 2017): the exact reference everything else is compared to."""
