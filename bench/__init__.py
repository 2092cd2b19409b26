"""Benchmarks on the Alibaba GPU trace (openb, USENIX ATC '23): placement quality
(`bench.fgd_inflation`) and speed (`bench.core_speed`). Not part of the product."""
