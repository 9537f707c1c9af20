#!/usr/bin/env node
// Runs one ONNX model through ONNX Runtime (CPU) on saved inputs, for bench/onnx_coverage.py.
// usage: NODE_PATH=<dir with node_modules> node ort_run.js MODEL.onnx THREADS SET_DIR [SET_DIR...]
// Each SET_DIR holds in.<input name>.npy for every input of the model; the outputs are written
// beside them as out.<output name>.npy. Prints one JSON line: {"load_ms", "run_ms": [per set]},
// or {"stage": "load" | "run", "error"} with exit status 1 when ONNX Runtime refuses the model or
// fails a run.
const ort = require('onnxruntime-node');
const path = require('path');
const { readNpy, writeNpy } = require('./npy');
const [model, threadsArg, ...sets] = process.argv.slice(2);
if (!sets.length) { console.error('usage: ort_run.js MODEL.onnx THREADS SET_DIR [SET_DIR...]'); process.exit(2); }
let stage = 'load';
(async () => {
  const t0 = performance.now();
  const s = await ort.InferenceSession.create(model, { intraOpNumThreads: parseInt(threadsArg), interOpNumThreads: 1 });
  const loadMs = performance.now() - t0, runMs = [];
  for (const dir of sets) {
    stage = 'input';
    const feeds = {};
    for (const name of s.inputNames) {
      const x = readNpy(path.join(dir, `in.${name}.npy`));
      feeds[name] = new ort.Tensor(x.type, x.data, x.shape);
    }
    stage = 'run';
    const t = performance.now();
    const out = await s.run(feeds);
    runMs.push(+(performance.now() - t).toFixed(3));
    for (const name of s.outputNames) writeNpy(path.join(dir, `out.${name}.npy`), out[name].type, out[name].dims, out[name].data);
  }
  console.log(JSON.stringify({ load_ms: +loadMs.toFixed(3), run_ms: runMs }));
})().catch(e => { console.log(JSON.stringify({ stage, error: String(e.message || e) })); process.exit(1); });
