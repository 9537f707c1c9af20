// Runs an ONNX model with ONNX Runtime (onnxruntime-node, bench/package.json) on one input: the
// independent execution tests/export_traced_test.cpp compares hgraph's ONNX exports against.
//
//   node tests/ort_run.js NODE_MODULES model.onnx INPUT_NAME float32|int64 D0,D1,... in.bin out.bin
//
// in.bin holds the input's little-endian elements; out.bin receives the first output's (float32).
const fs = require('fs');
const path = require('path');
const [modules, model, name, dtype, dims, inFile, outFile] = process.argv.slice(2);
const ort = require(path.join(modules, 'onnxruntime-node'));

(async () => {
  const session = await ort.InferenceSession.create(model, {intraOpNumThreads: 1, graphOptimizationLevel: 'all'});
  const bytes = fs.readFileSync(inFile);
  const copy = bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length);  // aligned
  const data = dtype === 'int64' ? new BigInt64Array(copy) : new Float32Array(copy);
  const out = await session.run({[name]: new ort.Tensor(dtype, data, dims.split(',').map(Number))});
  const y = out[session.outputNames[0]];
  fs.writeFileSync(outFile, Buffer.from(y.data.buffer, y.data.byteOffset, y.data.byteLength));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
