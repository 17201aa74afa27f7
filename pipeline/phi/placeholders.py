"""Typed placeholders that replace PHI in `placeholder` mode.

Each is one special token in the trained tokenizer (stages/tokenizer.py adds them), and the
`<|...|>` form cannot be confused with the corpus's own bracketed text ("[CI]", "[HR]")."""
PLACEHOLDERS = {
    "PERSON": "<|NAME|>", "LOCATION": "<|LOCATION|>", "DATE_TIME": "<|DATE|>", "AGE": "<|AGE|>",
    "PHONE_NUMBER": "<|PHONE|>", "EMAIL_ADDRESS": "<|EMAIL|>", "US_SSN": "<|SSN|>", "MEDICAL_RECORD": "<|MRN|>",
    "ACCOUNT_NUMBER": "<|ACCOUNT|>", "CREDIT_CARD": "<|ACCOUNT|>", "IBAN_CODE": "<|ACCOUNT|>",
    "LICENSE_NUMBER": "<|LICENSE|>", "MEDICAL_LICENSE": "<|LICENSE|>", "DEVICE_OR_VEHICLE_ID": "<|ID|>",
    "ID": "<|ID|>", "URL": "<|URL|>", "IP_ADDRESS": "<|IP|>",
}
DEFAULT_PLACEHOLDER = "<|PHI|>"


def placeholder_tokens() -> list[str]:
    """Every placeholder string, sorted: the special tokens a tokenizer must keep whole."""
    return sorted(set(PLACEHOLDERS.values()) | {DEFAULT_PLACEHOLDER})
