sed -i 's/ and n != 0//' num.py
