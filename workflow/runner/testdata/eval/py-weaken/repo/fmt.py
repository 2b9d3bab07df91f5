def percent(part, whole):
    return int(100 * part / whole)
