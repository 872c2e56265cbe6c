"""Statistical harnesses that certify a speculative verifier is zero-bias."""
