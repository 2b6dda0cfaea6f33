"""Test helpers shipped with the library (real servers on 127.0.0.1; no mocks of our code)."""
