"""The vLLM family: vLLM V1's scheduler with async scheduling and speculative decoding."""
