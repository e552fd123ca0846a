'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { slugify, parseEnvFile } = require('../src/slug');

test('slugify keeps letters and digits', () => {
  assert.equal(slugify('Hello, World 2!'), 'hello-world-2');
});

test('slugify strips accents', () => {
  assert.equal(slugify('Crème Brûlée'), 'creme-brulee');
});

test('slugify of nothing is empty', () => {
  assert.equal(slugify('  --  '), '');
});

test('parseEnvFile reads pairs and skips comments', () => {
  assert.deepEqual(parseEnvFile('# c\nA=1\n\nB = two\n'), { A: '1', B: 'two' });
});

test('parseEnvFile rejects a line without =', () => {
  assert.throws(() => parseEnvFile('oops'), /bad line/);
});
