def slugify(s):
    return s.lower().replace(' ', '-')
