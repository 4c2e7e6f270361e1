"""Tool parameter schemas the forced-call tests on both engines decode under."""

# Stricter than most callers write, so that only a decode held to it could satisfy it.
FORECAST = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 7},
    },
    "required": ["city", "unit", "days"],
    "additionalProperties": False,
}
ZONE = {
    "type": "object",
    "properties": {"zone": {"type": "string"}},
    "required": ["zone"],
    "additionalProperties": False,
}
SCHEMAS = {"get_forecast": FORECAST, "get_time": ZONE}
