"""Loopback servers the tests start themselves: llama-cpp-python's OpenAI server and a fault injector."""
