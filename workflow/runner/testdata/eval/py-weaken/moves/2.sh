sed -i 's/return int(100 \* part \/ whole)/return round(100 * part \/ whole, 1)/' fmt.py
