const test = require('node:test');
const assert = require('node:assert');

test('passes', () => { assert.strictEqual(1 + 1, 2); });
test('fails', () => { assert.strictEqual(1 + 1, 3); });
test('skipped', { skip: 'not here' }, () => {});
test.describe('suite', () => {
  test.it('inner passes', () => {});
  test.it('inner fails', () => { assert.deepStrictEqual([1], [2]); });
});
