"""Citations shared by several catalogue records (authors, year, title, arXiv id)."""
from __future__ import annotations

__all__ = ["BIGBIRD", "CHILD", "KATHAROPOULOS", "LONGFORMER", "PERFORMER", "ROUTING", "SURVEY", "VASWANI", "VYAS"]

VASWANI = 'A. Vaswani et al., 2017, "Attention Is All You Need", arXiv:1706.03762'
SURVEY = 'T. Lin et al., 2021, "A Survey of Transformers", arXiv:2106.04554'
LONGFORMER = 'I. Beltagy, M. E. Peters, A. Cohan, 2020, "Longformer: The Long-Document Transformer", arXiv:2004.05150'
BIGBIRD = 'M. Zaheer et al., 2020, "Big Bird: Transformers for Longer Sequences", arXiv:2007.14062'
CHILD = 'R. Child et al., 2019, "Generating Long Sequences with Sparse Transformers", arXiv:1904.10509'
KATHAROPOULOS = ('A. Katharopoulos et al., 2020, "Transformers are RNNs: Fast Autoregressive Transformers with '
                 'Linear Attention", arXiv:2006.16236')
PERFORMER = 'K. Choromanski et al., 2020, "Rethinking Attention with Performers", arXiv:2009.14794'
ROUTING = ('A. Roy, M. Saffar, A. Vaswani, D. Grangier, 2021, "Efficient Content-Based Sparse Attention with Routing '
           'Transformers", arXiv:2003.05997')
VYAS = ('A. Vyas, A. Katharopoulos, F. Fleuret, 2020, "Fast Transformers with Clustered Attention", '
        'arXiv:2007.04825')
