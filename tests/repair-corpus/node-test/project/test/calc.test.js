const test = require('node:test');
const assert = require('node:assert');
const { add, total } = require('../calc.js');

test('add', () => {
  assert.strictEqual(add(2, 3), 5);
});

test('total', () => {
  assert.strictEqual(total([1, 2, 3]), 6);
});
