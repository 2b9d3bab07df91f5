// chunk splits list into arrays of n items.
exports.chunk = (list, n) => {
  const out = [];
  for (let i = 0; i + n <= list.length; i += n) out.push(list.slice(i, i + n));
  return out;
};
