// The runtime of a model exported by fusegrad_webgpu.export_webgpu: buffers, pipelines, dispatches.

const ARRAYS = {
  float32: Float32Array, float16: Uint16Array, bfloat16: Uint16Array, int32: Int32Array,
  uint32: Uint32Array, int16: Int16Array, uint16: Uint16Array, int8: Int8Array, uint8: Uint8Array,
  bool: Uint8Array,
};

/** The tensors of a safetensors file, as byte views keyed by name. */
export function parseSafetensors(bytes) {
  const length = Number(new DataView(bytes.buffer, bytes.byteOffset).getBigUint64(0, true));
  const header = JSON.parse(new TextDecoder().decode(bytes.subarray(8, 8 + length)));
  const tensors = {};
  for (const [name, info] of Object.entries(header)) {
    if (name === "__metadata__") continue;
    const [start, end] = info.data_offsets;
    tensors[name] = bytes.subarray(8 + length + start, 8 + length + end);
  }
  return tensors;
}

/** The tensors of the safetensors file at ``url`` (``parseSafetensors``). */
export async function fetchTensors(url) {
  const response = await fetch(url);
  if (!response.ok) throw new Error(`${url}: HTTP ${response.status}`);
  return parseSafetensors(new Uint8Array(await response.arrayBuffer()));
}

/** A WebGPU device with the limits ``model`` needs (``wantedLimits``); its uncaptured errors
 * go to ``onError`` (a message). */
export async function openDevice(model, onError) {
  if (!navigator.gpu) throw new Error("this browser has no WebGPU (navigator.gpu is missing)");
  const adapter = await navigator.gpu.requestAdapter();
  if (!adapter) throw new Error("navigator.gpu found no adapter");
  const device = await adapter.requestDevice({ requiredLimits: wantedLimits(adapter, model) });
  device.addEventListener("uncapturederror", (e) => onError(e.error.message));
  return device;
}

/** ``data`` (a typed array) as bytes padded to whole 32-bit words, as WebGPU copies them. */
function words(data) {
  const bytes = new Uint8Array(data.buffer, data.byteOffset, data.byteLength);
  const padded = new Uint8Array(Math.max(4, Math.ceil(bytes.length / 4) * 4));
  padded.set(bytes);
  return padded;
}

/** WebGPU's default limits, which every adapter allows. */
const DEFAULT_LIMITS = {
  maxStorageBuffersPerShaderStage: 8, maxStorageBufferBindingSize: 134217728, maxBufferSize: 268435456,
};

/** The limits ``model`` needs above WebGPU's defaults (more storage buffers per kernel, larger
 * buffers), to request with the device; an error naming the limit where ``adapter`` lacks it. */
export function wantedLimits(adapter, model) {
  const needed = { ...(model.limits ?? {}) };
  needed.maxBufferSize = needed.maxStorageBufferBindingSize ?? 0;
  const wanted = {};
  for (const [name, value] of Object.entries(needed)) {
    if (value <= DEFAULT_LIMITS[name]) continue;
    if (adapter.limits[name] < value) {
      throw new Error(`the model needs ${name} >= ${value}, this adapter allows ${adapter.limits[name]}`);
    }
    wanted[name] = value;
  }
  return wanted;
}

/** Create the model's buffers and pipelines on ``device``; ``weights`` maps names to bytes
 * (each weight's, and each state's first value). */
export async function createModel(device, model, weights) {
  const usage = GPUBufferUsage.STORAGE | GPUBufferUsage.COPY_SRC | GPUBufferUsage.COPY_DST;
  const buffers = model.buffers.map((b) =>
    device.createBuffer({ size: Math.max(4, Math.ceil(b.bytes / 4) * 4), usage }));
  for (const b of model.buffers) {
    if (b.role !== "weight" && b.role !== "state") continue;
    if (!(b.name in weights)) throw new Error(`weight ${b.name} is missing from the weights file`);
    device.queue.writeBuffer(buffers[b.slot], 0, words(weights[b.name]));
  }
  const pipelines = await Promise.all(model.kernels.map((k) => device.createComputePipelineAsync({
    layout: "auto",
    compute: { module: device.createShaderModule({ code: k.code }), entryPoint: k.name },
  })));
  // one uniform buffer per list of variables: the kernels taking the same ones share it
  const uniforms = new Map();
  for (const d of model.dispatches ?? []) {
    const key = (d.variables ?? []).join(",");
    if (d.uniform == null || uniforms.has(key)) continue;
    const size = Math.max(16, Math.ceil(d.variables.length / 4) * 16);  // 16-byte aligned
    uniforms.set(key, device.createBuffer({ size, usage: GPUBufferUsage.UNIFORM | GPUBufferUsage.COPY_DST }));
  }
  const bindGroups = model.dispatches.map((d) => {
    const entries = d.bindings.map(([binding, slot]) => ({ binding, resource: { buffer: buffers[slot] } }));
    if (d.uniform != null) {
      entries.push({ binding: d.uniform, resource: { buffer: uniforms.get(d.variables.join(",")) } });
    }
    return device.createBindGroup({ layout: pipelines[d.kernel].getBindGroupLayout(0), entries });
  });

  /** Give each variable its value (an object: name -> integer) in the uniform buffers. */
  function setValues(values) {
    for (const [key, buffer] of uniforms) {
      const names = key.split(",");
      const data = new Int32Array(buffer.size / 4);
      names.forEach((name, i) => {
        if (!(name in values)) throw new Error(`no value given for the variable ${name}`);
        const [low, high] = model.variables[name];
        if (!(values[name] >= low && values[name] <= high)) {
          throw new Error(`variable ${name} = ${values[name]} is outside [${low}, ${high}]`);
        }
        data[i] = values[name];
      });
      device.queue.writeBuffer(buffer, 0, data);
    }
  }

  /** Run on ``inputs`` (typed arrays, one per model input) and the variables' ``values``
   * (by default the export's); resolves to the output arrays. The state written by this run
   * is what the next run reads. */
  async function run(inputs, values = model.values ?? {}) {
    model.inputs.forEach((slot, i) => {
      const bytes = words(inputs[i]);
      if (bytes.length > buffers[slot].size) {
        throw new Error(`input ${i} has ${inputs[i].byteLength} bytes, its buffer ${buffers[slot].size}`);
      }
      device.queue.writeBuffer(buffers[slot], 0, bytes);
    });
    setValues(values);
    const encoder = device.createCommandEncoder();
    const pass = encoder.beginComputePass();
    model.dispatches.forEach((d, i) => {
      pass.setPipeline(pipelines[d.kernel]);
      pass.setBindGroup(0, bindGroups[i]);
      pass.dispatchWorkgroups(...d.workgroups);
    });
    pass.end();
    for (const [after, before] of model.state ?? []) {  // as TinyJit's replay: next run reads it
      if (after !== before) encoder.copyBufferToBuffer(buffers[after], 0, buffers[before], 0, buffers[before].size);
    }
    const staging = model.outputs.map((slot) => {
      const copy = device.createBuffer({
        size: buffers[slot].size, usage: GPUBufferUsage.MAP_READ | GPUBufferUsage.COPY_DST });
      encoder.copyBufferToBuffer(buffers[slot], 0, copy, 0, copy.size);
      return copy;
    });
    device.queue.submit([encoder.finish()]);
    return Promise.all(staging.map(async (copy, i) => {
      await copy.mapAsync(GPUMapMode.READ);
      const bytes = copy.getMappedRange().slice(0);
      copy.destroy();
      const plan = model.buffers[model.outputs[i]];
      return new ARRAYS[plan.dtype](bytes, 0, plan.size);
    }));
  }
  return { run };
}
