"""The worker launcher (`launcher`) and the progress helper for training scripts."""
