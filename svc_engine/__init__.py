"""svc_engine: the pure rules of svc.

Nothing here does I/O, reads a clock or draws randomness: time, random bytes and
inputs are arguments, decisions are return values. Imports: standard library and
attrs only (a test enforces it).
"""
