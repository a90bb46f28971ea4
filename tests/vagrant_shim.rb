# Evaluates a Vagrantfile without Vagrant and prints, as JSON, what it configures: each
# machine's settings, networks and provisioners (tests/test_ansible.py reads it).
# Usage: ruby tests/vagrant_shim.rb Vagrantfile
require "json"

# Records attribute sets, calls and blocks, whatever the name (config.vm.network ..., etc.).
class Recorder
  attr_reader :data

  def initialize
    @data = {}
  end

  def method_missing(name, *args, **kwargs, &block)
    key = name.to_s
    if key.end_with?("=")
      @data[key.chomp("=")] = args.first
      return args.first
    end
    if args.empty? && kwargs.empty? && block.nil?
      @data[key] = Recorder.new unless @data[key].is_a?(Recorder)
      return @data[key]
    end
    child = Recorder.new
    (@data["#{key}()"] ||= []) << { "args" => args, "options" => kwargs, "block" => child }
    block&.call(child)
    child
  end

  def respond_to_missing?(*)
    true
  end

  def to_json(*args)
    @data.to_json(*args)
  end
end

module Vagrant
  @configs = []
  class << self
    attr_reader :configs

    def configure(version)
      config = Recorder.new
      yield config
      @configs << { "version" => version, "config" => config }
    end
  end
end

load ARGV.fetch(0)
puts JSON.pretty_generate(Vagrant.configs)
