// Hugging Face's side of ctest text.reference_hf (run_hf.sh; encode_corpus is remat's side): the
// npm package `tokenizers` (Hugging Face's own Rust library as a Node.js addon), printing what
// encode_corpus prints, line for line:
//   node encode_hf.js NODE_MODULES corpus TOKENIZER_JSON CORPUS   ids per document of a corpus
//        (make_corpus.py's `<length>\n<bytes>` records; bytes decoded as UTF-8 by Node first,
//        WHATWG: invalid bytes become U+FFFD, as remat's to_valid_utf8 does), encode(doc) with
//        addSpecialTokens false
//   node encode_hf.js NODE_MODULES codepoints TOKENIZER_JSON      "U+XXXX: ids" of "\n  X's" for
//        every code point; a surrogate as the bytes of its 3-byte form, decoded as above
//   node encode_hf.js NODE_MODULES nfc CORPUS                     each document in NFC (Hugging
//        Face's NFC normalizer), as `<length>\n<bytes>` records
const fs = require('fs');
const path = require('path');
const hf = require(path.join(process.argv[2], 'tokenizers'));
const mode = process.argv[3];

function documents(file) {
  const buf = fs.readFileSync(file);
  const docs = [];
  let i = 0;
  while (i < buf.length) {
    const nl = buf.indexOf(10, i);
    const n = parseInt(buf.toString('ascii', i, nl), 10);
    docs.push(buf.subarray(nl + 1, nl + 1 + n).toString('utf8'));
    i = nl + 1 + n;
  }
  return docs;
}

async function idsOf(tok, texts) {
  const out = [];
  for (let k = 0; k < texts.length; k += 512) {
    const encs = await tok.encodeBatch(texts.slice(k, k + 512), { addSpecialTokens: false });
    for (const e of encs) out.push(e.getIds().join(' '));
  }
  return out;
}

(async () => {
  let out;
  if (mode === 'corpus') {
    out = await idsOf(hf.Tokenizer.fromFile(process.argv[4]), documents(process.argv[5]));
  } else if (mode === 'codepoints') {
    const texts = [];
    const heads = [];
    for (let cp = 0; cp < 0x110000; ++cp) {
      const x = cp >= 0xd800 && cp <= 0xdfff
        ? Buffer.from([0xe0 | (cp >> 12), 0x80 | ((cp >> 6) & 0x3f), 0x80 | (cp & 0x3f)]).toString('utf8')
        : String.fromCodePoint(cp);
      texts.push('\n  ' + x + "'s");
      heads.push('U+' + cp.toString(16).toUpperCase().padStart(4, '0') + ': ');
    }
    const ids = await idsOf(hf.Tokenizer.fromFile(process.argv[4]), texts);
    out = ids.map((s, i) => heads[i] + s);
  } else if (mode === 'nfc') {
    const n = hf.nfcNormalizer();
    const parts = [];
    for (const d of documents(process.argv[4])) {
      const b = Buffer.from(n.normalizeString(d), 'utf8');
      parts.push(Buffer.from(b.length + '\n'), b);
    }
    fs.writeSync(1, Buffer.concat(parts));
    return;
  } else {
    process.stderr.write(`encode_hf.js: unknown mode '${mode}' (expected corpus, codepoints or nfc)\n`);
    process.exit(2);
  }
  fs.writeSync(1, out.join('\n') + '\n');
})();
