"""Chic (Gong et al., IWQoS 2019; issue 16): experience-driven worker and parameter-server
allocation, and its Chic-Pair and all-reduce variants. docs/chic.md."""
