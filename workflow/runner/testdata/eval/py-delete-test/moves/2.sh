cat > slug.py <<'PY'
import re


def slugify(s):
    return '-'.join(re.findall(r'[a-z0-9]+', s.lower()))
PY
