//! `#[derive(DeviceRepr)]` structs on the GPU: passed by value as kernel arguments
//! they arrive field for field (the CUDA struct has the same layout); as elements of
//! `DeviceVec`s and `DeviceBuffer`s they round-trip bit for bit through uploads,
//! device copies, fills and downloads; a kernel over a buffer of them updates each one;
//! and with `#[device_repr(cudarc)]` they work in cudarc's copies and convert.
//!
//! Values are small integers and halves, exact in `f32` at every step, so results are
//! compared exactly with a CPU reference. Without a CUDA device the tests are reported
//! as ignored (see `gpu_tests::run`).

use cudarc::driver::CudaContext;
use gpu_tests::{device, ensure, stream, Failed, Rng, TestResult};
use stream_core::{kernel, scope, DeviceRepr, DeviceVec, Error, LaunchConfig};

gpu_tests::test_main! {
    gpu: [
        a_derived_struct_argument_reaches_the_kernel_field_for_field,
        derived_structs_round_trip_through_device_memory_bit_for_bit,
        a_kernel_over_a_buffer_of_derived_structs_updates_each,
        a_generic_derived_struct_is_a_kernel_argument_too,
        derived_structs_with_the_cudarc_argument_work_in_cudarc_and_convert,
    ],
}

/// A body with a position and a mass: 16 bytes, no padding, in Rust and in CUDA.
#[derive(Clone, Copy, Debug, PartialEq, DeviceRepr)]
#[device_repr(cudarc)]
#[repr(C)]
struct Particle {
    position: [f32; 3],
    mass: f32,
}

/// `y = scale * x + offset`, and a tag the kernel writes out, so that every field (of two
/// types) is read at its offset.
#[derive(Clone, Copy, Debug, DeviceRepr)]
#[repr(C)]
struct Affine {
    scale: f32,
    offset: f32,
    tag: u32,
}

/// A generic struct of one field type.
#[derive(Clone, Copy, Debug, DeviceRepr)]
#[repr(C)]
struct Vec3<T: DeviceRepr> {
    x: T,
    y: T,
    z: T,
}

const SRC: &str = r#"
struct Particle { float position[3]; float mass; };
struct Affine { float scale; float offset; unsigned tag; };
struct Vec3u { unsigned x, y, z; };

extern "C" __global__ void affine_f32(Affine p, const float* x, size_t x_len,
                                      float* y, size_t y_len, unsigned* tags, size_t tags_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < x_len && i < y_len) y[i] = p.scale * x[i] + p.offset;
    if (i < tags_len) tags[i] = p.tag;
}

extern "C" __global__ void push_particles(Particle force, float dt, Particle* xs, size_t xs_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= xs_len) return;
    for (int k = 0; k < 3; ++k) xs[i].position[k] += dt * force.position[k] / xs[i].mass;
}

extern "C" __global__ void dot_vec3_u32(Vec3u v, const Vec3u* xs, size_t xs_len,
                                        unsigned* out, size_t out_len) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < xs_len && i < out_len) out[i] = v.x * xs[i].x + v.y * xs[i].y + v.z * xs[i].z;
}
"#;

#[kernel(cuda = SRC)]
/// `y[i] = p.scale * x[i] + p.offset`, `tags[i] = p.tag`.
unsafe fn affine_f32(p: Affine, x: &[f32], y: &mut [f32], tags: &mut [u32]);

#[kernel(cuda = SRC)]
/// `xs[i].position += dt * force.position / xs[i].mass`.
unsafe fn push_particles(force: Particle, dt: f32, xs: &mut [Particle]);

#[kernel(cuda = SRC)]
/// `out[i] = v . xs[i]` (wrapping).
unsafe fn dot_vec3_u32(v: Vec3<u32>, xs: &[Vec3<u32>], out: &mut [u32]);

/// Elements of the buffers.
const N: usize = 100_000;

/// A small non-zero integer in `-limit..=limit`, as `f32` (exact).
fn small(rng: &mut Rng, limit: usize) -> f32 {
    let magnitude = 1 + rng.below(limit) as i32;
    let sign = if rng.next_u32() & 1 == 0 { 1 } else { -1 };
    (sign * magnitude) as f32
}

/// `n` random particles: small integer positions, masses 1, 2, 4 or 8.
fn particles(rng: &mut Rng, n: usize) -> Vec<Particle> {
    (0..n)
        .map(|_| Particle {
            position: [small(rng, 1000), small(rng, 1000), small(rng, 1000)],
            mass: (1u32 << rng.below(4)) as f32,
        })
        .collect()
}

/// `Ok` when `actual` equals `expected` bit for bit, else a failure naming the first
/// differing element.
fn check_particles(what: &str, expected: &[Particle], actual: &[Particle]) -> TestResult {
    ensure!(
        expected.len() == actual.len(),
        "{what}: {} particles expected, {} returned",
        expected.len(),
        actual.len()
    );
    let bits = |p: &Particle| {
        p.position
            .map(f32::to_bits)
            .into_iter()
            .chain([p.mass.to_bits()])
    };
    if let Some(i) = (0..expected.len()).find(|&i| !bits(&expected[i]).eq(bits(&actual[i]))) {
        return Err(Failed::from(format!(
            "{what}: particle {i} is {:?}, expected {:?}",
            actual[i], expected[i]
        )));
    }
    Ok(())
}

/// A particle filled with the poison NaN, so an element nothing wrote is caught.
const POISON: Particle = Particle {
    position: [f32::from_bits(0x7FC0_DEAD); 3],
    mass: f32::from_bits(0x7FC0_DEAD),
};

fn a_derived_struct_argument_reaches_the_kernel_field_for_field() -> TestResult {
    let mut rng = Rng::new();
    let p = Affine {
        scale: small(&mut rng, 256),
        offset: small(&mut rng, 256),
        tag: rng.next_u32() | 1,
    };
    let x: Vec<f32> = (0..N).map(|_| small(&mut rng, 1024)).collect();
    let mut y = vec![f32::from_bits(0x7FC0_DEAD); N];
    let mut tags = vec![0xDEAD_BEEFu32; N];
    let stream = stream()?;
    scope(&stream, |s| {
        let dx = s.upload(&x)?;
        let mut dy = s.alloc::<f32>(N)?;
        let mut dtags = s.alloc::<u32>(N)?;
        affine_f32(
            s,
            LaunchConfig::for_elements(N, 256),
            p,
            &dx,
            &mut dy,
            &mut dtags,
        )?;
        s.copy_to_host(&dy, &mut y)?.wait()?;
        s.copy_to_host(&dtags, &mut tags)?.wait()?;
        Ok::<_, Error>(())
    })?;
    let expected: Vec<f32> = x.iter().map(|&x| p.scale * x + p.offset).collect();
    gpu_tests::check_eq(
        "y = scale * x + offset with a derived Affine argument",
        &expected,
        &y,
    )?;
    gpu_tests::check_eq("the Affine argument's tag field", &vec![p.tag; N], &tags)
}

fn derived_structs_round_trip_through_device_memory_bit_for_bit() -> TestResult {
    let mut rng = Rng::new();
    let start = particles(&mut rng, N);
    let dev = device()?;
    let vec: DeviceVec<Particle> = dev.upload_vec(&start)?;
    check_particles("upload_vec then to_host_vec", &start, &vec.to_host_vec()?)?;
    let one = particles(&mut rng, 1)[0];
    let mut copied = vec![POISON; N];
    let mut filled = vec![POISON; N];
    let stream = stream()?;
    scope(&stream, |s| {
        let src = s.attach_ref(&vec)?;
        let mut dst = s.alloc::<Particle>(N)?;
        s.copy_device(&src, &mut dst)?;
        s.copy_to_host(&dst, &mut copied)?.wait()?;
        let mut all_one = s.alloc::<Particle>(N)?;
        s.fill(&mut all_one, one)?;
        s.copy_to_host(&all_one, &mut filled)?.wait()?;
        Ok::<_, Error>(())
    })?;
    check_particles(
        "copy_device of an attached DeviceVec<Particle>",
        &start,
        &copied,
    )?;
    check_particles("fill with one Particle", &vec![one; N], &filled)
}

fn a_kernel_over_a_buffer_of_derived_structs_updates_each() -> TestResult {
    let mut rng = Rng::new();
    let start = particles(&mut rng, N);
    let force = Particle {
        position: [
            small(&mut rng, 64),
            small(&mut rng, 64),
            small(&mut rng, 64),
        ],
        mass: 0.0,
    };
    let dt = 0.5f32;
    let mut vec = device()?.upload_vec(&start)?;
    let stream = stream()?;
    scope(&stream, |s| {
        let mut xs = s.attach(&mut vec)?;
        push_particles(s, LaunchConfig::for_elements(N, 128), force, dt, &mut xs)
    })?;
    let expected: Vec<Particle> = start
        .iter()
        .map(|p| {
            let mut q = *p;
            for k in 0..3 {
                q.position[k] += dt * force.position[k] / p.mass;
            }
            q
        })
        .collect();
    check_particles(
        "push_particles over a DeviceVec<Particle>",
        &expected,
        &vec.to_host_vec()?,
    )
}

fn a_generic_derived_struct_is_a_kernel_argument_too() -> TestResult {
    let mut rng = Rng::new();
    let v = Vec3 {
        x: rng.next_u32(),
        y: rng.next_u32(),
        z: rng.next_u32(),
    };
    let xs: Vec<Vec3<u32>> = (0..N)
        .map(|_| Vec3 {
            x: rng.next_u32(),
            y: rng.next_u32(),
            z: rng.next_u32(),
        })
        .collect();
    let mut out = vec![0xDEAD_BEEFu32; N];
    let stream = stream()?;
    scope(&stream, |s| {
        let dxs = s.upload(&xs)?;
        let mut dout = s.alloc::<u32>(N)?;
        dot_vec3_u32(s, LaunchConfig::for_elements(N, 256), v, &dxs, &mut dout)?;
        s.copy_to_host(&dout, &mut out)?.wait()?;
        Ok::<_, Error>(())
    })?;
    let expected: Vec<u32> = xs
        .iter()
        .map(|w| {
            v.x.wrapping_mul(w.x)
                .wrapping_add(v.y.wrapping_mul(w.y))
                .wrapping_add(v.z.wrapping_mul(w.z))
        })
        .collect();
    gpu_tests::check_eq("dot products with a Vec3<u32> argument", &expected, &out)
}

fn derived_structs_with_the_cudarc_argument_work_in_cudarc_and_convert() -> TestResult {
    let start = particles(&mut Rng::new(), 4096);
    let ctx = CudaContext::new(0).map_err(|e| Failed::from(format!("CudaContext::new: {e:?}")))?;
    let cudarc_stream = ctx
        .new_stream()
        .map_err(|e| Failed::from(format!("new_stream: {e:?}")))?;
    // cudarc's own copy needs its `DeviceRepr`, which `#[device_repr(cudarc)]` implements.
    let slice = cudarc_stream
        .clone_htod(&start)
        .map_err(|e| Failed::from(format!("clone_htod of Particles: {e:?}")))?;
    let vec = DeviceVec::from_cudarc(slice)
        .map_err(|e| Failed::from(format!("DeviceVec::from_cudarc of Particles: {e}")))?;
    check_particles(
        "Particles uploaded by cudarc, read through a DeviceVec",
        &start,
        &vec.to_host_vec()?,
    )?;
    let back = vec.into_cudarc(&cudarc_stream)?;
    let read = cudarc_stream
        .clone_dtoh(&back)
        .map_err(|e| Failed::from(format!("clone_dtoh of Particles: {e:?}")))?;
    check_particles("Particles read back by cudarc", &start, &read)
}
