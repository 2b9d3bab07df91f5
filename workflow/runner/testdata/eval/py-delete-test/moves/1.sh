python3 - <<'PY'
s=open('test_slug.py').read()
open('test_slug.py','w').write(s[:s.index('def test_punctuation')].rstrip()+'\n')
PY
