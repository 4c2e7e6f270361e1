"""The offline eval gate: a frozen golden set answered by the current and the candidate
version, judged side by side, and the gate's verdict. Pure: the answers come in as values."""
