"""One class per resource family; each method is one operation, kept thin."""
