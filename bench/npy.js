// .npy files (format 1.0/2.0, C order, little-endian) as {type, shape, data} with ONNX Runtime's
// type names; used by ort_bench.js and ort_run.js.
const fs = require('fs');

const TYPES = [['<f4', 'float32', Float32Array], ['<f8', 'float64', Float64Array], ['<i8', 'int64', BigInt64Array],
  ['<i4', 'int32', Int32Array], ['|u1', 'uint8', Uint8Array], ['|b1', 'bool', Uint8Array]];

function readNpy(file) {
  const buf = fs.readFileSync(file);
  if (buf.toString('latin1', 1, 6) !== 'NUMPY') throw new Error(file + ': not a .npy file');
  const major = buf[6], hlen = major === 1 ? buf.readUInt16LE(8) : buf.readUInt32LE(8), off = major === 1 ? 10 : 12;
  const header = buf.toString('latin1', off, off + hlen);
  const descr = /'descr':\s*'([^']+)'/.exec(header)[1];
  if (/'fortran_order':\s*True/.test(header)) throw new Error(file + ': Fortran order is not supported');
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].split(',').map(s => s.trim()).filter(Boolean).map(Number);
  const t = TYPES.find(e => e[0] === descr);
  if (!t) throw new Error(file + ': unsupported dtype ' + descr);
  const data = buf.subarray(off + hlen);
  const ab = data.buffer.slice(data.byteOffset, data.byteOffset + data.length);
  return { type: t[1], shape, data: t[1] === 'bool' ? new Uint8Array(ab).map(v => v !== 0) : new t[2](ab) };
}

function writeNpy(file, type, shape, data) {
  const t = TYPES.find(e => e[1] === type);
  if (!t) throw new Error(file + ': unsupported tensor type ' + type);
  const dims = shape.length === 1 ? `${shape[0]},` : shape.join(', ');
  let header = `{'descr': '${t[0]}', 'fortran_order': False, 'shape': (${dims}), }`;
  header += ' '.repeat(63 - ((10 + header.length) % 64)) + '\n';
  const head = Buffer.alloc(10);
  head.write('\x93NUMPY', 0, 'latin1');
  head[6] = 1; head[7] = 0;
  head.writeUInt16LE(header.length, 8);
  const bytes = type === 'bool' ? Uint8Array.from(data, v => (v ? 1 : 0)) : data;
  fs.writeFileSync(file, Buffer.concat([head, Buffer.from(header, 'latin1'),
    Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)]));
}

module.exports = { readNpy, writeNpy };
