//! The hand-written declarations match reshard.h:
//! - every struct's size and field offsets equal what a C compiler computes
//!   from the header (skipped, with a message, when no C compiler or header
//!   is found: set CC and RESHARD_INCLUDE_DIR);
//! - the function table has the size the library reports, and each of its
//!   fields points at the exported function of the same name (which proves
//!   the field order).
use reshard_sys::*;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;

macro_rules! layout_rows {
    ($($ty:ident { $($field:ident),* $(,)? })*) => {{
        let mut rust = Vec::new();
        let mut c = String::new();
        $(
            rust.push(format!("{} {}", stringify!($ty), size_of::<$ty>()));
            c.push_str(&format!(
                "  printf(\"{} %zu\\n\", sizeof({}));\n", stringify!($ty), stringify!($ty)));
            $(
                rust.push(format!("{}.{} {}", stringify!($ty), stringify!($field),
                                  offset_of!($ty, $field)));
                c.push_str(&format!(
                    "  printf(\"{}.{} %zu\\n\", offsetof({}, {}));\n",
                    stringify!($ty), stringify!($field), stringify!($ty), stringify!($field)));
            )*
        )*
        (rust, c)
    }};
}

fn include_dir() -> Option<PathBuf> {
    let candidates = [
        std::env::var_os("RESHARD_INCLUDE_DIR").map(PathBuf::from),
        option_env!("RESHARD_SYS_INCLUDE_DIR").map(PathBuf::from),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../capi/include")),
    ];
    candidates.into_iter().flatten().find(|d| d.join("reshard/reshard.h").exists())
}

#[test]
fn struct_layouts_match_the_c_header() {
    let (rust, body) = layout_rows! {
        reshard_axes_t { names, count }
        reshard_plan_options_t { struct_size, split_min_bytes, alpha_seconds,
            intra_host_bytes_per_second, inter_host_bytes_per_second, staging_budget_bytes, relays, reduce_scatter,
            nics_per_host, single_hop_guard }
        reshard_plan_request_t { struct_size, scope, process, global_stats, reserved0, threads,
            reserved1, max_plan_bytes }
        reshard_plan_stats_t { struct_size, network_bytes, local_bytes, cross_host_bytes,
            cross_process_bytes, max_send_bytes, max_recv_bytes, messages, pieces, rounds,
            peak_staging_bytes, lower_bound_network_bytes, lower_bound_max_send_bytes,
            lower_bound_max_recv_bytes, cost_seconds, lower_bound_cost_seconds, plan_seconds,
            num_devices, stages, max_host_send_bytes, max_host_recv_bytes,
            lower_bound_cross_host_bytes, lower_bound_max_host_send_bytes,
            lower_bound_max_host_recv_bytes, lower_bound_binding, reserved0,
            lower_bound_binding_id, forwarded_bytes, max_scratch_bytes }
        reshard_device_traffic_t { struct_size, device, send_bytes, recv_bytes, local_bytes,
            send_messages, recv_messages }
        reshard_part_info_t { struct_size, num_local_pieces, num_sends, num_send_pieces,
            num_recvs, num_recv_pieces, num_scratch }
        reshard_scratch_t { struct_size, tensor, device, bytes }
        reshard_message_t { struct_size, src_device, dst_device, round, first_piece,
            num_pieces, bytes, stage, sub }
        reshard_piece_t { struct_size, tensor, src_entry, dst_entry, src_device, dst_device,
            bytes, stage }
        reshard_serialize_options_t { struct_size, all_parts, process, key, key_size }
        reshard_deserialize_options_t { struct_size, key, key_size }
        reshard_executor_options_t { struct_size, transport, threads, timeout_seconds }
        reshard_src_buffer_t { data, bytes }
        reshard_dst_buffer_t { data, bytes }
        reshard_tensor_buffers_t { src, num_src, dst, num_dst }
        reshard_verify_report_t { struct_size, tensors, elements, bytes, mismatches }
        reshard_executor_info_t { struct_size, transport, rank, size, reserved0 }
        reshard_api_t { struct_size, abi_major, abi_minor, version, plan_create,
            executor_verify, transport_available, executor_info, mpi_executor_create,
            nccl_unique_id, nccl_executor_create, plan_device_location, plan_part_scratch,
            plan_deserialize_with_options, plan_verify_bytes_with_options, plan_input_num_flats,
            plan_input_flat_tensor, plan_tensor_dst_dtype }
    };
    let Some(include) = include_dir() else {
        eprintln!(
            "SKIP struct_layouts_match_the_c_header: reshard/reshard.h not found \
                   (set RESHARD_INCLUDE_DIR)"
        );
        return;
    };
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let source = dir.join("reshard_layout.c");
    let exe = dir.join("reshard_layout");
    std::fs::write(
        &source,
        format!(
            "#include <stddef.h>\n#include <stdio.h>\n#include \"reshard/reshard.h\"\n\
             int main(void) {{\n{body}  return 0;\n}}\n"
        ),
    )
    .unwrap();
    let status =
        match Command::new(&cc).arg("-std=c11").arg("-I").arg(&include).arg(&source).arg("-o").arg(&exe).status() {
            Ok(status) => status,
            Err(e) => {
                eprintln!("SKIP struct_layouts_match_the_c_header: no C compiler ({cc}: {e})");
                return;
            }
        };
    assert!(status.success(), "{cc} failed on {}", source.display());
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    let c: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(String::from).collect();
    assert_eq!(rust, c, "Rust declarations (left) differ from reshard.h (right)");
}

#[test]
fn constants_match_the_library() {
    unsafe {
        assert_eq!(reshard_version_number(), RESHARD_VERSION_NUMBER);
        assert_eq!(reshard_dtype_size(RESHARD_DTYPE_BF16), 2);
        assert_eq!(reshard_dtype_size(RESHARD_DTYPE_F64), 8);
        assert_eq!(reshard_dtype_size(RESHARD_DTYPE_BOOL), 1);
        let name = std::ffi::CStr::from_ptr(reshard_error_code_name(RESHARD_ERROR_CORRUPT));
        assert_eq!(name.to_str().unwrap(), "corrupt");
        let name = std::ffi::CStr::from_ptr(reshard_error_code_name(RESHARD_ERROR_INTERNAL));
        assert_eq!(name.to_str().unwrap(), "internal");
        let name = std::ffi::CStr::from_ptr(reshard_error_code_name(RESHARD_ERROR_RESOURCE_EXHAUSTED));
        assert_eq!(name.to_str().unwrap(), "resource_exhausted");
    }
}

#[test]
fn function_table_matches_the_exported_functions() {
    let api = unsafe { reshard_get_api(RESHARD_ABI_MAJOR) };
    assert!(!api.is_null());
    assert!(unsafe { reshard_get_api(RESHARD_ABI_MAJOR + 1) }.is_null());
    let api = unsafe { &*api };
    assert_eq!(api.abi_minor, RESHARD_ABI_MINOR, "these declarations follow ABI 1.14");
    assert_eq!(api.struct_size, size_of::<reshard_api_t>(), "table size");
    assert_eq!(api.abi_major, RESHARD_ABI_MAJOR);
    macro_rules! same {
        ($($field:ident => $func:ident),* $(,)?) => {$(
            assert_eq!(api.$field.map(|f| f as usize), Some($func as *const () as usize),
                       concat!("reshard_api_t.", stringify!($field)));
        )*};
    }
    same! {
        version => reshard_version, version_number => reshard_version_number,
        error_code => reshard_error_code, error_message => reshard_error_message,
        error_destroy => reshard_error_destroy, error_code_name => reshard_error_code_name,
        dtype_size => reshard_dtype_size, dtype_name => reshard_dtype_name,
        dtype_from_name => reshard_dtype_from_name, mesh_create => reshard_mesh_create,
        mesh_destroy => reshard_mesh_destroy, mesh_rank => reshard_mesh_rank,
        mesh_size => reshard_mesh_size, layout_create_named => reshard_layout_create_named,
        layout_create_boxes => reshard_layout_create_boxes,
        layout_destroy => reshard_layout_destroy, layout_rank => reshard_layout_rank,
        layout_shape => reshard_layout_shape, layout_num_entries => reshard_layout_num_entries,
        layout_entry => reshard_layout_entry, topology_create => reshard_topology_create,
        topology_destroy => reshard_topology_destroy,
        topology_add_device => reshard_topology_add_device,
        topology_num_devices => reshard_topology_num_devices,
        plan_input_create => reshard_plan_input_create,
        plan_input_from_spec => reshard_plan_input_from_spec,
        plan_input_destroy => reshard_plan_input_destroy,
        plan_input_add_tensor => reshard_plan_input_add_tensor,
        plan_input_set_topology => reshard_plan_input_set_topology,
        plan_input_set_options => reshard_plan_input_set_options,
        plan_input_num_tensors => reshard_plan_input_num_tensors,
        plan_input_fingerprint => reshard_plan_input_fingerprint,
        plan_create => reshard_plan_create, plan_destroy => reshard_plan_destroy,
        plan_fingerprint => reshard_plan_fingerprint, plan_stats => reshard_plan_stats,
        plan_device_traffic => reshard_plan_device_traffic,
        plan_num_tensors => reshard_plan_num_tensors, plan_tensor_name => reshard_plan_tensor_name,
        plan_tensor_dtype => reshard_plan_tensor_dtype, plan_tensor_rank => reshard_plan_tensor_rank,
        plan_tensor_shape => reshard_plan_tensor_shape,
        plan_tensor_num_entries => reshard_plan_tensor_num_entries,
        plan_tensor_entry => reshard_plan_tensor_entry,
        plan_tensor_partial => reshard_plan_tensor_partial,
        plan_entry_of_device => reshard_plan_entry_of_device,
        plan_num_processes => reshard_plan_num_processes, plan_process => reshard_plan_process,
        plan_has_part => reshard_plan_has_part, plan_part_info => reshard_plan_part_info,
        plan_part_message => reshard_plan_part_message, plan_part_piece => reshard_plan_part_piece,
        buffer_data => reshard_buffer_data, buffer_size => reshard_buffer_size,
        buffer_destroy => reshard_buffer_destroy, plan_serialize => reshard_plan_serialize,
        plan_deserialize => reshard_plan_deserialize, plan_verify_bytes => reshard_plan_verify_bytes,
        executor_create => reshard_executor_create, executor_destroy => reshard_executor_destroy,
        executor_execute => reshard_executor_execute, oracle_fill_source => reshard_oracle_fill_source,
        oracle_check_destination => reshard_oracle_check_destination,
        executor_verify => reshard_executor_verify,
        transport_available => reshard_transport_available,
        executor_info => reshard_executor_info,
        mpi_executor_create => reshard_mpi_executor_create,
        nccl_unique_id => reshard_nccl_unique_id,
        nccl_executor_create => reshard_nccl_executor_create,
        plan_device_location => reshard_plan_device_location,
        plan_part_scratch => reshard_plan_part_scratch,
        plan_deserialize_with_options => reshard_plan_deserialize_with_options,
        plan_verify_bytes_with_options => reshard_plan_verify_bytes_with_options,
        plan_input_num_flats => reshard_plan_input_num_flats,
        plan_input_flat_info => reshard_plan_input_flat_info,
        plan_input_flat_device => reshard_plan_input_flat_device,
        plan_input_flat_tensor => reshard_plan_input_flat_tensor,
        plan_tensor_dst_dtype => reshard_plan_tensor_dst_dtype,
        plan_tensor_scales => reshard_plan_tensor_scales,
    }
}
